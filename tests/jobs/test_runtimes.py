"""Each runtime's invocation of the training step (ddpimg.jobs.runtimes)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ddpimg.jobs import render_script
from ddpimg.jobs.runtimes import _RENDERERS, edf_lines, invocation
from ddpimg.site.container import RUNTIMES
from ddpimg.site.model import Container
from tests.jobs.conftest import shipped, spec_for


def test_every_runtime_has_a_renderer() -> None:
    assert set(_RENDERERS) == set(RUNTIMES)


def words(site: str, **flags: Any) -> list[str]:
    spec = spec_for(site, **flags)
    found = invocation(spec, shipped(site))
    return [w for line in found.prefix for w in shlex.split(" ".join(line))]


@pytest.mark.parametrize(
    ("flags", "gpu_words", "image"),
    [({}, ["--gpu"], "ddpimg:gpu-cu128"), ({"gpu_request": "none"}, [], "ddpimg:cpu"),
     ({"gpu_vendor": "amd"}, ["--device=/dev/kfd", "--device=/dev/dri"], "ddpimg:gpu-cu128")],
)  # fmt: skip
def test_podman_hpc(flags: dict[str, Any], gpu_words: list[str], image: str) -> None:
    found = words("perlmutter", **flags)
    assert found[:2] == ["podman-hpc", "shared-run"]
    assert found[2 : 2 + len(gpu_words)] == gpu_words
    rest = found[2 + len(gpu_words) :]
    assert rest[:6] == ["--network=host", "--ipc=host", "--user=0:0", "--env", "SLURM_*",
                        "--volume"]  # fmt: skip
    assert "/dev/cxi0:/dev/cxi0" in rest  # the fabric's devices
    assert rest[-1] == image


def test_pyxis_is_srun_options_and_the_command_runs_inside() -> None:
    spec = spec_for("generic", gpus_per_node=4, runtime="pyxis", binds=("/data",))
    found = invocation(spec, shipped("generic"))
    assert found.prefix == ()
    assert found.srun_options == (
        "--container-image=./ddpimg+gpu.sqsh",
        '--container-mounts="${PWD}:${PWD},/data:/data"',
        '--container-workdir="${PWD}"',
    )


def test_edf_names_image_mounts_workdir_and_the_sites_hooks() -> None:
    spec = spec_for("alps")
    assert edf_lines(spec, shipped("alps")) == [
        'image = "${PWD}/ddpimg+gpu-arm64.sqsh"',
        'mounts = ["${PWD}", "/capstor:/capstor", "/iopsstor:/iopsstor"]',
        'workdir = "${PWD}"',
        "",
        "[annotations]",
        'com.hooks.aws_ofi_nccl.enabled = "true"',
        'com.hooks.aws_ofi_nccl.variant = "cuda13"',
        'com.hooks.netstack.source = "host"',
    ]
    found = invocation(spec, shipped("alps"))
    assert found.srun_options == ('--environment="$edf"',)


def test_the_edf_file_written_by_the_script_is_what_edf_lines_says(tmp_path: Path) -> None:
    script = render_script(spec_for("alps"), shipped("alps"))
    preamble = script[script.index("edf=") : script.index("\nEDF\n") + len("\nEDF\n")]
    env = {"PWD": str(tmp_path), "SLURM_JOB_ID": "9", "PATH": "/usr/bin:/bin"}
    subprocess.run(["bash", "-c", preamble], cwd=tmp_path, env=env, check=True, timeout=30)
    written = (tmp_path / "ddpimg-9.toml").read_text()
    assert written.splitlines() == edf_lines(spec_for("alps"), shipped("alps"))


def test_a_sites_options_and_annotations_only_go_with_its_own_runtime() -> None:
    profile = shipped("alps")
    own = invocation(spec_for("alps"), profile)
    assert "com.hooks.aws_ofi_nccl.enabled" in "\n".join(own.preamble)
    other = invocation(spec_for("alps", runtime="apptainer"), profile)
    assert other.preamble == ()
    options = shipped("perlmutter")
    changed = type(options)(**{**vars(options), "container": Container("podman-hpc", "",
                                                                       ("--cfs",))})  # fmt: skip
    assert "--cfs" in render_script(spec_for("perlmutter"), changed)
    assert "--cfs" not in render_script(spec_for("perlmutter", runtime="docker"), changed)
