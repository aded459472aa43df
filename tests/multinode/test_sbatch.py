"""A batch script from `ddpimg sbatch` runs a 2-node job on the namespace cluster: the
script's srun starts one task per "GPU" on each node, and the per-step losses are those of
one process."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.datagen import make_image_tree
from tests.integration.runs import QUICK_TOLERANCE, QUICK_TRAIN, command, run, summary, train_losses
from tests.integration.test_sbatch import wait_for_end
from tests.multinode.conftest import SHORT_NAME_PROFILE, TIMEOUT_S
from tests.noise import assert_within

pytestmark = [pytest.mark.multinode, pytest.mark.slurm, pytest.mark.torchrun]


def test_generated_two_node_job_matches_one_process(
    cluster_env: dict[str, str], reference_losses: list[float], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    sbatch = [
        command("ddpimg"), "sbatch", "--site", str(SHORT_NAME_PROFILE), "--runtime", "none",
        "--gpu-request", "none", "--nodes", "2", "--gpus-per-node", "2", "--time", "10",
        "--submit", "--", "train", *QUICK_TRAIN, "--timeout", str(TIMEOUT_S), "--out", str(out),
    ]  # fmt: skip
    proc = run(sbatch, cluster_env, cwd=tmp_path, timeout=60)
    job_id = proc.stdout.strip()
    assert re.fullmatch(r"\d+", job_id), f"not a job id: {proc.stdout!r}"
    log = tmp_path / f"ddpimg-{job_id}.out"
    info = wait_for_end(job_id, cluster_env, log)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), log.read_text()
    text = log.read_text()
    hosts: dict[int, set[str]] = {}
    for task, node in ((0, 0), (1, 0), (2, 1), (3, 1)):
        pattern = rf"ddpimg: task {task} \(node {node}, local {task % 2}\) on (node\d)"
        found = re.search(pattern, text)
        assert found, text
        hosts.setdefault(node, set()).add(found.group(1))
    assert len(hosts[0]) == len(hosts[1]) == 1
    assert hosts[0] != hosts[1], "the two nodes of the job must be two namespace nodes"
    assert summary(out)["world_size"] == 4
    assert_within(
        train_losses(out), reference_losses, QUICK_TOLERANCE, "sbatch 2-node job vs 1 process"
    )


def test_staged_data_is_copied_to_each_nodes_disk_and_removed(
    cluster_env: dict[str, str], tmp_path: Path
) -> None:
    # Shards on the shared file system; each namespace node has its own /dev/shm, so a
    # rank can only read its node's copy, and the job completes only if both nodes got one.
    make_image_tree(tmp_path / "tree", classes=2, train_per_class=16, val_per_class=4)
    shards = tmp_path / "shards"
    run([command("ddpimg"), "data", "pack", str(tmp_path / "tree"), str(shards)], cluster_env)
    out = tmp_path / "run"
    sbatch = [
        command("ddpimg"), "sbatch", "--site", str(SHORT_NAME_PROFILE), "--runtime", "none",
        "--gpu-request", "none", "--nodes", "2", "--gpus-per-node", "1", "--time", "10",
        "--stage-data", str(shards), "--local-dir", "/dev/shm", "--submit", "--",
        "train", "resnet", "--arch", "resnet18", "--image-size", "32", "--global-batch-size", "8",
        "--max-steps", "3", "--workers", "0", "--timeout", str(TIMEOUT_S), "--out", str(out),
    ]  # fmt: skip
    job_id = run(sbatch, cluster_env, cwd=tmp_path, timeout=60).stdout.strip()
    log = tmp_path / f"ddpimg-{job_id}.out"
    info = wait_for_end(job_id, cluster_env, log)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), log.read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["data"]["source"] == f"/dev/shm/ddpimg-data-{job_id}"
    assert manifest["data"]["layout"] == "webdataset"
    assert summary(out)["steps"] == 3
    # The copies kept the shards' times, so their index was taken as it was, not rebuilt.
    assert "indexing" not in log.read_text()
    left = run(
        [
            "srun",
            "-N2",
            "--ntasks-per-node=1",
            "sh",
            "-c",
            f"ls /dev/shm | grep -c {job_id} || true",
        ],
        cluster_env,
        timeout=60,
    )
    assert left.stdout.split() == ["0", "0"], "the staged copies must be removed after the job"
