"""ddpimg inside an image it did not build: a stock Debian image with CPU torch, built here,
ddpimg installed into it the documented way (a venv with --system-site-packages over the
image's Python), and a 2-node job `ddpimg sbatch --image ... --ddpimg-from VENV` renders for
podman-hpc, run on the namespace cluster: the losses are those of one process in the same
image, and the run used the image's torch. Then an add-on built in that image and mounted
by the cluster's runtime (podman-hpc) in a job of two ranks that import it."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.addon.packages import NEEDS_TORCH, PURE, make_index
from tests.engines.netns import NamespaceCluster
from tests.integration.runs import QUICK_TOLERANCE, QUICK_TRAIN, command, run, train_losses
from tests.integration.test_sbatch import wait_for_end
from tests.multinode.conftest import PROFILES, SHORT_NAME_PROFILE, TIMEOUT_S
from tests.multinode.stock_image import TAG, build_stock_image, install_ddpimg, remove_store
from tests.noise import assert_within

pytestmark = [pytest.mark.multinode, pytest.mark.slurm, pytest.mark.podman]

IMAGE_TORCH = "2.13.0+cpu"
STEP_LIMIT_S = 600


@pytest.fixture(scope="module")
def site_image(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, str], Path]]:
    """podman-hpc's environment with the stock image in its store, and the venv."""
    work = tmp_path_factory.mktemp("site-image")
    with tempfile.TemporaryDirectory(prefix="ddpimg-stock-", ignore_cleanup_errors=True) as store:
        env = build_stock_image(work, Path(store))
        try:
            venv = work / "ddpimg-venv"
            install_ddpimg(env, venv, work / "dist")
            yield env, venv
        finally:
            remove_store(env)


def test_two_nodes_train_in_an_image_ddpimg_did_not_build(
    cluster: NamespaceCluster,
    cluster_env: dict[str, str],
    site_image: tuple[dict[str, str], Path],
    tmp_path: Path,
) -> None:
    podman_env, venv = site_image
    reference = tmp_path / "reference"
    run(["podman-hpc", "run", "--rm", "--volume", f"{tmp_path}:{tmp_path}",
         "--volume", f"{venv}:{venv}", TAG, f"{venv}/bin/train", *QUICK_TRAIN,
         "--site", "local", "--out", str(reference)], podman_env, timeout=STEP_LIMIT_S)  # fmt: skip
    env = cluster_env | {
        name: podman_env[name]
        for name in ("PATH", "USER", "PODMANHPC_CONFIG_FILE", "CONTAINERS_CONF")
    }
    out = tmp_path / "run"
    sbatch = [
        command("ddpimg"), "sbatch", "--site", str(SHORT_NAME_PROFILE), "--runtime",
        "podman-hpc", "--image", TAG, "--ddpimg-from", str(venv), "--bind", str(PROFILES),
        "--gpu-request", "none", "--nodes", "2", "--gpus-per-node", "2", "--time", "10",
        "--submit", "--", "train", *QUICK_TRAIN, "--timeout", str(TIMEOUT_S), "--out", str(out),
    ]  # fmt: skip
    job_id = run(sbatch, env, cwd=tmp_path, timeout=60).stdout.strip()
    assert re.fullmatch(r"\d+", job_id), job_id
    log = tmp_path / f"ddpimg-{job_id}.out"
    info = wait_for_end(job_id, env, log)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), log.read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["versions"]["torch"] == IMAGE_TORCH  # the image's torch, not the host's
    assert manifest["distributed"]["world_size"] == 4
    assert_within(
        train_losses(out), train_losses(reference), QUICK_TOLERANCE, "2 nodes in the site image"
    )


PROBE_SCRIPT = """
import sys
import torch.distributed as dist
import addon_probe_torch

dist.init_process_group("gloo")
total = addon_probe_torch.ones() * (dist.get_rank() + 1)
dist.all_reduce(total)
if dist.get_rank() == 0:
    print("addon", addon_probe_torch.__file__, float(total.sum()), flush=True)
dist.destroy_process_group()
"""


def test_an_addon_built_in_the_site_image_is_imported_by_two_ranks_under_srun(
    cluster: NamespaceCluster,
    cluster_env: dict[str, str],
    site_image: tuple[dict[str, str], Path],
    tmp_path: Path,
) -> None:
    """docs/addons.md on the namespace cluster's runtime, podman-hpc: an add-on built in the
    site's image from the host (--image, --ddpimg-from), then a job `ddpimg sbatch --addon`
    renders: every node unpacks it, podman-hpc binds it read-only, two ranks import it."""
    podman_env, venv = site_image
    tmp_path.chmod(0o755)
    index = make_index(tmp_path / "index", IMAGE_TORCH)
    (tmp_path / "probe.txt").write_text(f"{NEEDS_TORCH}\n")
    build = run(
        [command("ddpimg"), "addon", "build", "-r", str(tmp_path / "probe.txt"), "--image", TAG,
         "--engine", "podman-hpc", "--ddpimg-from", str(venv), "--find-links", str(index),
         "--no-index"],
        podman_env, cwd=tmp_path, timeout=STEP_LIMIT_S,
    )  # fmt: skip
    sha256 = next(line.split()[1] for line in build.stdout.splitlines() if line.startswith("sha"))
    (tmp_path / "probe_train.py").write_text(PROBE_SCRIPT)
    env = cluster_env | {
        name: podman_env[name]
        for name in ("PATH", "USER", "PODMANHPC_CONFIG_FILE", "CONTAINERS_CONF")
    }
    out = tmp_path / "run"
    sbatch = [
        command("ddpimg"), "sbatch", "--site", str(SHORT_NAME_PROFILE), "--runtime",
        "podman-hpc", "--image", TAG, "--ddpimg-from", str(venv), "--bind", str(PROFILES),
        "--gpu-request", "none", "--nodes", "1", "--gpus-per-node", "2", "--time", "10",
        "--addon", "probe.addon.sqsh", "--submit", "--", "train", "--timeout", str(TIMEOUT_S),
        "--out", str(out), "--script", "probe_train.py",
    ]  # fmt: skip
    job_id = run(sbatch, env, cwd=tmp_path, timeout=60).stdout.strip()
    log = tmp_path / f"ddpimg-{job_id}.out"
    info = wait_for_end(job_id, env, log)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), log.read_text()
    assert (
        "addon /opt/ddpimg/addons/probe/site-packages/addon_probe_torch.py 6.0" in log.read_text()
    )
    (addon,) = json.loads((out / "manifest.json").read_text())["addons"]
    assert (addon["name"], addon["sha256"]) == ("probe", sha256)
    assert addon["packages"] == {NEEDS_TORCH: "1.0", PURE: "1.0"}
    assert not list(Path(tempfile.gettempdir()).glob(f"ddpimg-addons-{job_id}"))  # removed
