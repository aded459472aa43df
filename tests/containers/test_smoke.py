"""Smoke tests of the built image under a real Docker engine (`nox -s smoke`).

Each test runs the image the way people do: read-only root (as a SIF is), non-root user,
`ddpimg doctor`, and a host environment full of module-system variables; two containers as
two ranks of one Slurm step, started by the very line `ddpimg sbatch` renders, are in
test_runtimes.py. ``DDPIMG_TEST_IMAGE`` names the image (conftest.py).

Two local workers training on a read-only root: test_trackers_log_offline_on_a_read_only_root
(every step's loss read back), and the documented lines `docker run --rm [--read-only --tmpfs
/tmp] ddpimg:cpu train --nproc-per-node 2 --data synthetic --epochs 1`, which
test_documented_commands.py runs in the image.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.addon.packages import EXTENSION, NEEDS_TORCH, PINS_TORCH, PURE, SDIST, make_index
from tests.integration.runs import QUICK_TRAIN, read_metrics, run, train_losses

pytestmark = pytest.mark.docker

READ_ONLY = ["--read-only", "--tmpfs", "/tmp"]
# Inside the container: where a host directory is mounted for outputs.
OUT = "/out"


def docker_env() -> dict[str, str]:
    return dict(os.environ)


def docker_run(
    image: str,
    command: Sequence[str],
    *,
    options: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """`docker run --rm OPTIONS -e NAME=VALUE... IMAGE COMMAND`."""
    variables = [f"--env={name}={value}" for name, value in sorted((env or {}).items())]
    cmd = ["docker", "run", "--rm", *options, *variables, image, *command]
    return run(cmd, docker_env(), timeout=timeout, check=check)


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    """A host directory the image's non-root user can write into."""
    tmp_path.chmod(0o777)
    return tmp_path


def mounted(out_dir: Path) -> list[str]:
    return ["--volume", f"{out_dir}:{OUT}"]


@pytest.fixture(scope="module")
def image_config(image: str) -> dict[str, Any]:
    proc = run(["docker", "image", "inspect", image], docker_env(), timeout=60)
    config: dict[str, Any] = json.loads(proc.stdout)[0]["Config"]
    return config


@pytest.fixture(scope="module")
def build_info(image: str) -> dict[str, Any]:
    proc = docker_run(image, ["cat", "/etc/ddpimg/build-info.json"], timeout=60)
    info: dict[str, Any] = json.loads(proc.stdout)
    return info


def test_image_runs_as_non_root_without_site_variables(
    image: str, image_config: dict[str, Any]
) -> None:
    assert image_config["User"] == "ddp"
    uid = docker_run(image, ["id", "-u"], timeout=60).stdout.strip()
    assert uid != "0"
    names = {entry.partition("=")[0] for entry in image_config["Env"]}
    assert "PYTHONNOUSERSITE" in names
    assert not {n for n in names if n.startswith(("NCCL_", "GLOO_", "MASTER_", "DDPIMG_SITE"))}
    labels = image_config["Labels"]
    for key in ("title", "version", "revision", "created"):
        assert labels.get(f"org.opencontainers.image.{key}"), key


def test_no_build_input_is_left_in_the_image(image: str) -> None:
    history = run(["docker", "history", "--no-trunc", image], docker_env(), timeout=60).stdout
    assert "WHEELS_URL" not in history
    assert "127.0.0.1" not in history
    leftovers = docker_run(
        image,
        ["sh", "-c", "ls -d /tmp/ddpimg-* /opt/ddpimg/build /root/.cache 2>/dev/null; true"],
        timeout=60,
    )
    assert leftovers.stdout.strip() == ""


def test_build_info_describes_the_image(image: str, build_info: dict[str, Any]) -> None:
    assert build_info["image"] == "ddpimg"
    assert build_info["flavour"] == "cpu"
    assert build_info["packages"]["torch"]
    assert build_info["packages"]["ddpimg"]
    assert len(build_info["lock"]["sha256"]) == 64
    assert build_info["build_date"]
    assert build_info["open_mpi"]


def test_caches_are_writable_on_a_read_only_root(image: str) -> None:
    """Where torch's JIT extensions (DeepSpeed's ops), Triton's cache and matplotlib's
    cache go must be writable with a read-only root, as in a SIF."""
    probe = (
        "import os, matplotlib, torch.utils.cpp_extension as ext\n"
        "dirs = [ext._get_build_directory('ddpimg_probe', False), matplotlib.get_cachedir()]\n"
        "try:\n"
        "    from triton import knobs\n"  # with torch's CUDA builds only (the gpu flavour)
        "    dirs.append(knobs.cache.dir)\n"
        "except ImportError:\n"
        "    pass\n"
        "for d in dirs:\n"
        "    os.makedirs(d, exist_ok=True)\n"
        "    open(os.path.join(d, 'probe'), 'w').close()\n"
        "    print(d)\n"
    )
    proc = docker_run(image, ["python3", "-c", probe], options=READ_ONLY, timeout=120)
    dirs = proc.stdout.split()
    assert len(dirs) >= 2, proc.stdout
    for directory in dirs:
        assert directory.startswith("/tmp/"), proc.stdout


def slurm_step(rank: int, job_id: str) -> dict[str, str]:
    """What `srun -n 2` on one node gives task ``rank`` (Slurm 22.05)."""
    return {
        "SLURM_JOB_ID": job_id,
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
        "SLURM_NODEID": "0",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_STEP_NUM_NODES": "1",
        # A node name that resolves to loopback on any machine, so nothing leaves it.
        "SLURM_STEP_NODELIST": "localhost",
        "SLURM_STEP_TASKS_PER_NODE": "2",
    }


def test_doctor_inside_the_container(image: str) -> None:
    proc = docker_run(image, ["ddpimg", "doctor", "--site", "local"], options=READ_ONLY)
    assert proc.returncode == 0
    assert "all-reduce" in (proc.stdout + proc.stderr).lower()


# A login shell with modules loaded and a conda environment active, as it reaches the
# container under Apptainer (which passes the host environment through).
POLLUTED = {
    "PYTHONPATH": "/host/python",
    "PYTHONHOME": "/host/python-home",
    "PYTHONSTARTUP": "/host/python/startup.py",
    "LD_LIBRARY_PATH": "/host/lib:/usr/local/nvidia/lib64",
    "LD_PRELOAD": "",
    "CONDA_PREFIX": "/opt/conda/envs/torch",
    "CONDA_DEFAULT_ENV": "torch",
    "CONDA_SHLVL": "2",
    "CONDA_EXE": "/opt/conda/bin/conda",
    "VIRTUAL_ENV": "/home/user/venv",
    "LOADEDMODULES": "gcc/12.2:cuda/12.4:python/3.10",
    "MODULEPATH": "/appl/modules",
    "_LMFILES_": "/appl/modules/gcc/12.2:/appl/modules/cuda/12.4",
}


@pytest.fixture
def host_python(tmp_path: Path) -> Path:
    """A host "site-packages" whose torch cannot be imported, and a startup file that fails."""
    python = tmp_path / "python"
    (python / "torch").mkdir(parents=True)
    (python / "torch" / "__init__.py").write_text("raise ImportError('the host torch leaked in')\n")
    (python / "startup.py").write_text("raise SystemExit('PYTHONSTARTUP leaked in')\n")
    (tmp_path / "lib").mkdir()
    return tmp_path


def test_a_polluted_host_environment_still_trains(
    image: str, out_dir: Path, host_python: Path, build_info: dict[str, Any]
) -> None:
    options = [*READ_ONLY, *mounted(out_dir), "--volume", f"{host_python}:/host:ro"]
    env_json = docker_run(
        image, ["ddpimg", "env", "--json", "--site", "local"], options=options, env=POLLUTED
    )
    removed = set(json.loads(env_json.stdout)["removed"])
    assert set(POLLUTED) <= removed, removed

    docker_run(
        image,
        ["train", "--site", "local", *QUICK_TRAIN, "--out", f"{OUT}/polluted"],
        options=options,
        env=POLLUTED,
    )
    manifest = json.loads((out_dir / "polluted" / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert len(train_losses(out_dir / "polluted")) == 8
    # The image's build-info file is recorded in every run's manifest, and which image it is
    # at a glance: the tree digest that `ddpimg doctor --verify` recomputes.
    assert manifest["versions"]["image"] == build_info
    assert manifest["image"] == {
        "flavour": build_info["flavour"],
        "lock": build_info["lock"],
        "apt_lock": build_info["apt_lock"],
        "tree_digest": build_info["tree"]["digest"],
    }


def test_trackers_log_offline_on_a_read_only_root(
    image: str, out_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 local workers log to TensorBoard, W&B (offline) and MLflow (file store) inside the
    container, root read-only, HOME on the tmpfs; each tracker's own reader, on the host,
    reads back the losses of metrics.jsonl."""
    from tests.trackers.offline import OFFLINE_ENV
    from tests.trackers.readback import mlflow_series, tensorboard_scalars, wandb_history

    command = [
        "train", "--nproc-per-node", "2", "--site", "local", *QUICK_TRAIN,
        "--log-to", "tensorboard,wandb,mlflow", "--out", f"{OUT}/trackers",
    ]  # fmt: skip
    docker_run(image, command, options=[*READ_ONLY, *mounted(out_dir)], env=OFFLINE_ENV)
    out = out_dir / "trackers"
    expected = [(m["step"], m["loss"]) for m in read_metrics(out) if m["kind"] == "train"]
    assert len(expected) == 8

    board = tensorboard_scalars(out / "tensorboard")["train/loss"]
    assert [step for step, _ in board] == [step for step, _ in expected]
    (offline,) = (out / "wandb").glob("offline-run-*")
    rows = wandb_history(offline, dict(os.environ) | OFFLINE_ENV)
    assert [(r["_step"], r["train/loss"]) for r in rows if "train/loss" in r] == expected
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient((out / "mlruns").resolve().as_uri())
    run_id = json.loads((out / "trackers.json").read_text())["mlflow"]["run_id"]
    assert mlflow_series(client, run_id, "train/loss") == expected


# The limit for the cpu image, in decimal gigabytes (2e9 bytes, 7 % under 2 GiB), of
# what the engine reports as the image's size (its layers, uncompressed, on disk).
CPU_IMAGE_MAX_BYTES = 2_000_000_000


def test_the_cpu_image_is_at_most_2_gb(image: str, build_info: dict[str, Any]) -> None:
    if build_info["flavour"] != "cpu":
        pytest.skip(f"{image} is the {build_info['flavour']} flavour")
    size = run(["docker", "image", "inspect", "--format", "{{.Size}}", image], docker_env(),
               timeout=60).stdout  # fmt: skip
    assert int(size) <= CPU_IMAGE_MAX_BYTES, f"{image}: {int(size) / 1e9:.2f} GB"
    # Its torch is the CPU build: no CUDA library among its packages.
    assert build_info["packages"]["torch"].endswith("+cpu")


# Inside a fresh container: no compiler to run, DeepSpeed under ZeRO-3 with the toy trainer's
# Adam (every ZeRO stage and bundled optimizer JIT-compiles the same one op on the CPU, the
# shared-memory all-reduce: docs/containers.md), then where that op was loaded from and what
# the writable tmpfs holds afterwards.
FRESH_CONTAINER = """
set -eu
for compiler in cc gcc c++ g++; do
    if command -v "$compiler"; then echo "compiler found: $compiler"; exit 3; fi
done
train toy --nproc-per-node 2 --site local --strategy deepspeed --zero-stage 3 \
    --data synthetic --max-steps 2 --train-samples 64 --eval-samples 16 \
    --global-batch-size 8 --out /tmp/run 2>&1
python3 -c 'from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder
print("op:", ShareMemCommBuilder().load().__file__)' 2>&1
echo "written: $(find /tmp -name '*torch_extensions*' -o -name '*.ninja' -o -name '*.so')"
"""


def test_a_fresh_container_compiles_nothing(image: str, build_info: dict[str, Any]) -> None:
    """The cpu image's DeepSpeed ops are built with it: a fresh container on a read-only root
    trains with DeepSpeed, which loads the built op, without a compiler and without writing a
    torch_extensions directory (HOME and TMPDIR are the tmpfs)."""
    if build_info["flavour"] != "cpu":
        pytest.skip(f"{image} is the {build_info['flavour']} flavour (DeepSpeed JIT-compiles)")
    assert "deepspeed_shm_comm" in build_info["deepspeed_ops"]
    proc = docker_run(image, ["sh", "-c", FRESH_CONTAINER], options=READ_ONLY, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    (op,) = [line for line in lines if line.startswith("op: ")]
    assert op.startswith("op: /opt/ddpimg/venv/lib/"), proc.stdout
    assert lines[-1] == "written: ", proc.stdout
    assert "torch_extensions" not in proc.stdout


# ---- add-ons (docs/addons.md) ---------------------------------------------------------------
# Built in the image from a local index of packages made here (tests/addon/packages.py): one
# build from the host through the engine (--image, the documented way), then, inside one
# container, the lock built again, the refusals, and torch's files hashed before and after.
ADDON_REQUIREMENTS = f"{NEEDS_TORCH}\n{SDIST}\n"
IN_THE_IMAGE = """
set -u
torch_files() {
    cd /opt/ddpimg/venv/lib/python3.11/site-packages/torch &&
        find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum
}
before=$(torch_files)
build() { ddpimg addon build --find-links /w/index --no-index "$@" 2>>/w/refusals.log; }
build --lock /w/probe.lock -o /w/again/probe.addon.sqsh >/dev/null; echo "lock $?"
sha256sum /w/again/probe.addon.sqsh
for case in pins direct ext; do
    build -r "/w/$case.txt" -o "/w/$case/x.addon.sqsh"
    echo "$case $?"
done
[ "$before" = "$(torch_files)" ] && echo "torch unchanged"
site=/opt/ddpimg/venv/lib/python3.11/site-packages
pip list --path "$site" 2>/dev/null | grep -ci addon-probe || true
"""
PROBE_SCRIPT = """
import sys
import torch.distributed as dist
import addon_probe_sdist
import addon_probe_torch
import ddpimg

dist.init_process_group("gloo")
total = addon_probe_torch.ones() * (dist.get_rank() + 1)
dist.all_reduce(total)
ddpimg.log(1, loss=float(total.sum()))
if dist.get_rank() == 0:
    print("from", addon_probe_torch.__file__, addon_probe_sdist.WORD)
    print("order", [p for p in sys.path if p.endswith("site-packages")])
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def addon_work(image: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The index, requirements and one add-on built from the host in ``image``
    (``ddpimg addon build --image``), in a directory the image's user can write to."""
    work = tmp_path_factory.mktemp("addon")
    work.chmod(0o777)
    torch_version = docker_run(image, ["python3", "-c", "import torch; print(torch.__version__)"],
                               timeout=120).stdout.strip()  # fmt: skip
    make_index(work / "index", torch_version, extension=True)
    requirements = {
        "probe": ADDON_REQUIREMENTS,
        "pins": f"{PINS_TORCH}\n",
        "direct": f"{PURE}\ntorch==2.5.1\n",
        "ext": f"{EXTENSION}\n",
    }
    for name, text in requirements.items():
        (work / f"{name}.txt").write_text(text)
    for sub in ("again", "pins", "direct", "ext"):
        (work / sub).mkdir(mode=0o777)
        (work / sub).chmod(0o777)
    build = run(
        [sys.executable, "-m", "ddpimg", "addon", "build", "-r", str(work / "probe.txt"),
         "--image", image, "--engine", "docker", "--find-links", str(work / "index"),
         "--no-index", "-o", str(work / "probe.addon.sqsh")],
        docker_env(), timeout=600,
    )  # fmt: skip
    summary = dict(line.split(None, 1) for line in build.stdout.splitlines() if line.strip())
    return {"work": work, "sha256": summary["sha256"].strip(), "torch": torch_version}


def test_an_addon_builds_in_the_image_the_same_twice_and_never_touches_it(
    image: str, addon_work: dict[str, Any]
) -> None:
    work = addon_work["work"]
    assert (work / "probe.lock").read_text().count("--hash=sha256:") == 3
    proc = docker_run(image, ["sh", "-c", IN_THE_IMAGE], options=["--volume", f"{work}:/w"],
                      timeout=600)  # fmt: skip
    lines = proc.stdout.splitlines()
    refusals = (work / "refusals.log").read_text()
    assert lines[0] == "lock 0", refusals
    assert lines[1].split()[0] == addon_work["sha256"]  # the same lock, the same bytes
    assert lines[2:5] == ["pins 2", "direct 2", "ext 2"], refusals
    assert lines[5:] == ["torch unchanged", "0"], proc.stdout
    torch_version = addon_work["torch"]
    assert (
        f"addon-probe-pins 1.0 requires torch==2.5.1, but the image has torch {torch_version}"
        in refusals
    )
    assert f"torch==2.5.1 would replace the image's torch {torch_version}" in refusals
    assert (
        "addon-probe-ext 1.0 is a source distribution with compiled code (probe.cpp), and this "
        "image has no C/C++ compiler"
    ) in refusals
    assert not list((work / "pins").iterdir())


def test_two_ranks_import_an_addon_after_the_images_packages(
    image: str, addon_work: dict[str, Any], out_dir: Path
) -> None:
    """`ddpimg addon image` (the laptop's way): a two-rank `train --script` imports the
    add-on's packages, the image's own come first, and the manifest records the add-on."""
    work = addon_work["work"]
    (work / "probe_train.py").write_text(PROBE_SCRIPT)
    tag = run([sys.executable, "-m", "ddpimg", "addon", "image", str(work / "probe.addon.sqsh"),
               "--base", image, "--tag", f"{image}-addon-test"],
              docker_env(), timeout=600).stdout.strip()  # fmt: skip
    try:
        proc = docker_run(
            tag,
            ["train", "--nproc-per-node", "2", "--site", "local", "--out", f"{OUT}/addon",
             "--script", "/w/probe_train.py"],
            options=[*READ_ONLY, *mounted(out_dir), "--volume", f"{work}:/w:ro"],
        )  # fmt: skip
        # The add-on lies beside the image, not in it: the image's tree is still the build's.
        verified = docker_run(tag, ["ddpimg", "doctor", "--verify"], options=READ_ONLY)
    finally:
        run(["docker", "rmi", tag], docker_env(), timeout=120, check=False)
    assert "verify: add-ons mounted beside the image, not in its tree: probe" in verified.stdout
    assert "is the build record's" in verified.stdout
    assert "from /opt/ddpimg/addons/probe/site-packages/addon_probe_torch.py built" in proc.stdout
    order = [
        "/opt/ddpimg/venv/lib/python3.11/site-packages",
        "/opt/ddpimg/addons/probe/site-packages",
    ]
    assert f"order {order}" in proc.stdout
    manifest = json.loads((out_dir / "addon" / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    (addon,) = manifest["addons"]
    assert addon["name"] == "probe"
    assert addon["sha256"] == addon_work["sha256"]
    assert addon["packages"] == {"addon-probe-pure": "1.0", "addon-probe-sdist": "1.0",
                                 "addon-probe-torch": "1.0"}  # fmt: skip
    assert read_metrics(out_dir / "addon")[0]["loss"] == 6.0  # (1 + 2) * ones(2), summed


def test_an_addon_made_for_another_package_set_stops_every_rank_before_the_rendezvous(
    image: str, addon_work: dict[str, Any], tmp_path: Path
) -> None:
    """The probe add-on as if built in another image: both ranks of a Slurm step exit 2 at
    once, each with one line naming both package sets."""
    unpacked = tmp_path / "other"
    run(["unsquashfs", "-no-progress", "-dest", str(unpacked),
         str(addon_work["work"] / "probe.addon.sqsh")], docker_env(), timeout=120)  # fmt: skip
    info = json.loads((unpacked / "addon.json").read_text())
    info["package_set"] = "f" * 64
    (unpacked / "addon.json").write_text(json.dumps(info))
    (unpacked / "package-set").write_text("f" * 64 + "\n")
    options = ["--network=host", "--volume", f"{unpacked}:/opt/ddpimg/addons/probe:ro"]
    job_id = str(43000 + os.getpid() % 10000)
    ranks = [
        subprocess.Popen(
            [
                "docker",
                "run",
                "--rm",
                *options,
                *(f"--env={k}={v}" for k, v in slurm_step(rank, job_id).items()),
                image,
                "train",
                "--site",
                "local",
                "--script",
                "/nowhere.py",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    for proc in ranks:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, err
        (line,) = err.splitlines()
        assert line.startswith("ddpimg: error: add-on probe (/opt/ddpimg/addons/probe) was made "
                               "for package set ffffffffffff ")  # fmt: skip
        assert "but this image's is " in line
