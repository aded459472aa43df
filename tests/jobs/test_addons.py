"""Add-ons in a job (ddpimg.jobs.addons): mounted by the runtimes that can mount a squashfs,
unpacked on every node and bound by the others, their sha256 taken at the job's start; and
the script run with stub commands and a real squashfs file."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from ddpimg.addon.sitepath import mount_name
from ddpimg.cli import build_parser
from ddpimg.cli.sbatch_cmd import prepare
from ddpimg.errors import JobError
from ddpimg.jobs import raise_for_errors
from ddpimg.site import load_profile
from tests.jobs.stubs import install_stubs, run_script

COMMON = ["--nodes", "2", "--time", "1:00:00", "--gpu-request", "none", "--gpus-per-node", "2"]
ADDON = "/proj/timm.addon.sqsh"


def script(*args: str, command: tuple[str, ...] = ("train", "--script", "t.py")) -> str:
    parsed = build_parser().parse_args(
        ["sbatch", "--site", "generic", *COMMON, *args, "--", *command]
    )
    prepared = prepare(parsed, {}, "example-host")
    raise_for_errors(prepared.findings)
    return prepared.script()


@pytest.mark.parametrize(
    ("runtime", "mount"),
    [
        ("apptainer", "--bind /proj/timm.addon.sqsh:/opt/ddpimg/addons/timm:image-src=/ "),
        ("singularity", "--bind /proj/timm.addon.sqsh:/opt/ddpimg/addons/timm:image-src=/ "),
        ("edf", '"/proj/timm.addon.sqsh:/opt/ddpimg/addons/timm:sqsh"]'),
        ("pyxis", ',${DDPIMG_ADDON_DIR}/timm:/opt/ddpimg/addons/timm:ro"'),
        ("podman-hpc", '--volume "${DDPIMG_ADDON_DIR}/timm:/opt/ddpimg/addons/timm:ro"'),
        ("docker", '--volume "${DDPIMG_ADDON_DIR}/timm:/opt/ddpimg/addons/timm:ro"'),
        ("none", 'export DDPIMG_ADDON_ROOT="${DDPIMG_ADDON_DIR}" PYTHONNOUSERSITE=1'),
    ],
)
def test_each_runtime_mounts_the_addon_its_own_way(runtime: str, mount: str) -> None:
    text = script("--runtime", runtime, "--addon", ADDON)
    assert mount in text
    assert 'DDPIMG_ADDONS="${DDPIMG_ADDONS:+${DDPIMG_ADDONS},}timm=${sum%% *}"' in text
    unpacks = runtime in ("pyxis", "podman-hpc", "docker", "none")
    assert ("unsquashfs -no-progress -no-xattrs" in text) is unpacks
    assert ('rm -rf -- "${DDPIMG_ADDON_DIR}"' in text) is unpacks
    if runtime in ("docker", "podman-hpc"):
        assert "--env DDPIMG_ADDONS" in text  # these pass no variable by themselves


def test_without_addons_nothing_changes() -> None:
    assert "DDPIMG_ADDON" not in script("--runtime", "pyxis")


def _stubs(tmp_path: Path) -> Path:
    """The stub commands, unsquashfs among the recorders (it creates nothing)."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    install_stubs(stubs)
    (stubs / "unsquashfs").write_text((stubs / "mkdir").read_text())
    (stubs / "unsquashfs").chmod(0o755)
    return stubs


def _squashfs(directory: Path, name: str) -> Path:
    tree = directory / "tree"
    (tree / "site-packages").mkdir(parents=True)
    (tree / "site-packages" / "probe.py").write_text("VALUE = 1\n")
    path = directory / f"{name}.addon.sqsh"
    subprocess.run(["mksquashfs", str(tree), str(path), "-noappend", "-quiet", "-no-progress"],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    return path


def test_the_script_takes_the_sha256_unpacks_on_every_node_and_cleans_up(tmp_path: Path) -> None:
    addon = _squashfs(tmp_path, "probe")
    text = script(
        "--runtime", "none", "--addon", "probe.addon.sqsh",
        command=("bash", "-c", 'printenv DDPIMG_ADDONS DDPIMG_ADDON_ROOT >&2'),
    )  # fmt: skip
    run = run_script(text, tmp_path, _stubs(tmp_path))
    assert run.returncode == 0, run.stderr
    digest = hashlib.sha256(addon.read_bytes()).hexdigest()
    unpacked = f"{tmp_path}/local/ddpimg-addons-42"
    assert f"probe={digest}\n{unpacked}\n" in run.stderr
    calls = [(call.program, call.argv) for call in run.calls]
    assert ("unsquashfs", ["-no-progress", "-no-xattrs", "-dest", f"{unpacked}/probe",
                           f"{tmp_path}/probe.addon.sqsh"]) in calls  # fmt: skip
    assert calls[-1] == ("rm", ["-rf", "--", unpacked])


def test_an_addon_missing_at_the_jobs_start_stops_it_before_the_step(tmp_path: Path) -> None:
    text = script("--runtime", "apptainer", "--addon", "gone.addon.sqsh")
    run = run_script(text, tmp_path, _stubs(tmp_path))
    assert run.returncode == 1
    assert f"ddpimg: add-on {tmp_path}/gone.addon.sqsh cannot be read" in run.stderr
    assert not [call for call in run.calls if call.program == "apptainer"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--addon", "a/timm.addon.sqsh", "--addon", "b/timm.addon.sqsh"],
         "--addon b/timm.addon.sqsh and --addon a/timm.addon.sqsh are both add-on timm"),
        (["--addon", "x,y.addon.sqsh"], "is not an add-on file"),
        (["--addon", "a:b.addon.sqsh"], "is not an add-on file"),
        (["--addon", "/p/-bad.addon.sqsh"], "is not an add-on file"),
    ],
)  # fmt: skip
def test_addons_that_cannot_be_mounted_are_refused(args: list[str], message: str) -> None:
    with pytest.raises(JobError, match=message):
        script(*args)


def test_submit_checks_the_file_is_a_squashfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.addon.sqsh").write_text("not a squashfs")
    parsed = build_parser().parse_args(
        ["sbatch", "--site", "generic", *COMMON, "--addon", "notes.addon.sqsh", "--submit",
         "--", "train", "--script", "t.py"]
    )  # fmt: skip
    with pytest.raises(JobError, match=r"--addon notes\.addon\.sqsh: no squashfs file there"):
        raise_for_errors(prepare(parsed, {}, "example-host").findings)


def test_a_sites_addons_and_the_jobs_are_mounted_together(tmp_path: Path) -> None:
    profile = tmp_path / "lab.toml"
    profile.write_text(
        '[site]\nname = "lab"\n[job]\naddons = ["/shared/lab-utils.addon.sqsh"]\n'
        '[container]\nruntime = "apptainer"\n'
    )
    parsed = build_parser().parse_args(
        ["sbatch", "--site", str(profile), *COMMON, "--addon", ADDON, "--", "train", "mnist"]
    )
    text = prepare(parsed, {}, "example-host").script()
    assert "/shared/lab-utils.addon.sqsh:/opt/ddpimg/addons/lab-utils:image-src=/" in text
    assert "/proj/timm.addon.sqsh:/opt/ddpimg/addons/timm:image-src=/" in text
    assert load_profile(profile).job.addons == ("/shared/lab-utils.addon.sqsh",)


@pytest.mark.parametrize(
    ("filename", "name"),
    [("timm.addon.sqsh", "timm"), ("lab.sqsh", "lab"), ("/a/b/x.squashfs", "x"), ("y", "y")],
)
def test_the_mount_name_is_the_files_name(filename: str, name: str) -> None:
    assert mount_name(filename) == name
