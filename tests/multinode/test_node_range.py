"""A job of ``ddpimg sbatch --nodes 1-2`` that loses a node goes on by itself, end to end:
on the namespace cluster the job runs on two nodes (one rank each); once a checkpoint is
written the node of rank 1 is drained (a health check or an administrator taking a bad node
out) and that rank is killed (SIGKILL: what a node that fails takes with it). Rank 0 names
the lost rank and exits 5, srun reports 137, the job script sees ``rank_lost`` in
manifest.json and requeues the job; Slurm starts it again on the one node left, and the same
command continues from the last checkpoint at world size 1, with the losses of a run never
disturbed (the trajectory and its tolerance: STEPS below).

The job trains gpt tiny with DeepSpeed ZeRO-2 in micro-batches of 8 (``--micro-batch-size``):
on two nodes each rank takes one a step, on the one left it accumulates two, so the global
batch holds and so does the memory a rank needs; the checkpoint of two ranks continues on one
through ddpimg's universal form (kept beside it: checked below). The other strategies'
resume on another world size: tests/integration/test_any_shape.py.

Slurm 22.05 (Debian 12) starts a ``--nodes=1-2`` job on one node even with two idle
(measured here), so the test makes the first start a two-node one: the job waits with both
nodes drained, its size is set to 2 (``scontrol update NumNodes=2-2``), the nodes come
back; after the requeue it is 1-2 again, as the script asked (``NumTasks=1`` too: the
update to 2 nodes made it 2)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpimg.train.checkpoint.files import CHECKPOINTS, candidates
from ddpimg.train.strategies.deepspeed_universal import UNIVERSAL, read
from tests.engines.netns import NamespaceCluster
from tests.integration.runs import command, read_metrics, run, train_losses
from tests.integration.test_sbatch import job_info, release_requeued, wait_for_end, wait_until
from tests.multinode.conftest import RUN_LIMIT_S, SHORT_NAME_PROFILE, TIMEOUT_S
from tests.noise import FLOAT32_STEP, Tolerance, assert_within

pytestmark = [
    pytest.mark.multinode, pytest.mark.slurm, pytest.mark.torchrun, pytest.mark.deepspeed
]  # fmt: skip

# The trajectory compared: gpt tiny, global batch 16 in micro-batches of 8, DeepSpeed ZeRO-2,
# checkpoints every 4 steps; 24 steps (python -m tests.noise -- TRAIN --max-steps 24, AMD
# EPYC, 2026-11-29: 1 thread, torch's default kernels, oneDNN at SSE4.1, MKL's compatible
# path and 2 ranks on each stay within 0.28x the floor of 1.2e-7 (one float32 step) over the
# 24; mnist under the same flags is chaotic, 1 thread parting by 339x at step 6). The
# tolerance is 10x the most seen, rounded up.
STEPS = 24
CONTINUED_TOLERANCE = Tolerance(floor=FLOAT32_STEP, multiple=5, steps=STEPS)
TRAIN = [
    "gpt", "--size", "tiny", "--seq-len", "32", "--data", "synthetic", "--epochs", "1",
    "--log-every", "1", "--global-batch-size", "16", "--train-samples", "512",
    "--eval-samples", "64", "--seed", "7",
    "--strategy", "deepspeed", "--zero-stage", "2", "--micro-batch-size", "8",
]  # fmt: skip
# Every checkpoint kept: the one the requeued job continued from holds its universal form.
CONTINUED = [
    *TRAIN,
    "--max-steps",
    str(STEPS),
    "--checkpoint-every",
    "4",
    "--keep-checkpoints",
    "9",
]
# The whole run: one epoch of CONTINUED's 512 samples in global batches of 16 (32 steps), so
# that the kill comes well before STEPS wherever the first checkpoint (step 4) lands.
WHOLE = [*CONTINUED, "--max-steps", "2000"]
KILL_LIMIT_S = 240.0


def _set_state(env: dict[str, str], node: str, state: str) -> None:
    reason = ["reason=ddpimg node-range test"] if state != "resume" else []
    run(["scontrol", "update", f"nodename={node}", f"state={state}", *reason], env, timeout=30)


@pytest.fixture
def nodes(cluster: NamespaceCluster, cluster_env: dict[str, str]) -> Iterator[list[str]]:
    """The cluster's nodes, every one of them back in service after the test."""
    names = list(cluster.node_names)
    try:
        yield names
    finally:
        for name in names:
            subprocess.run(
                ["scontrol", "update", f"nodename={name}", "state=resume"],
                env=cluster_env, capture_output=True, timeout=30, check=False,
            )  # fmt: skip


def _rank_process(job_id: str, rank: int) -> tuple[int, str] | None:
    """The PID of the job's training process of ``rank`` and its node (None yet): Slurm put
    its job id and the task's rank in the environment the process started with (kept by
    the clean re-exec, ``python -m ddpimg train ...``)."""
    wanted = (f"SLURM_JOB_ID={job_id}".encode(), f"SLURM_PROCID={rank}".encode())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(word == b"train" or word.endswith(b"/train") for word in cmdline) and all(
            item in environ for item in wanted
        ):
            node = next(
                (
                    v.split(b"=", 1)[1].decode()
                    for v in environ
                    if v.startswith(b"SLURMD_NODENAME=")
                ),
                "",
            )
            return int(entry.name), node
    return None


def _job_processes(job_id: str) -> str:
    """The job's processes, for a failure's message."""
    lines = []
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if f"SLURM_JOB_ID={job_id}".encode() in environ:
            ranks = [v.decode() for v in environ if v.startswith(b"SLURM_PROCID=")]
            lines.append(f"{entry.name} {ranks} {cmdline[:200]!r}")
    return "\n".join(lines)


def test_a_node_range_job_that_loses_a_node_requeues_and_finishes_on_the_other(
    nodes: list[str], cluster_env: dict[str, str], run_env: dict[str, str], tmp_path: Path
) -> None:
    straight = tmp_path / "straight"
    run([command("train"), *WHOLE, "--out", str(straight)], run_env, timeout=RUN_LIMIT_S)
    expected = train_losses(straight)

    two, others = nodes[:2], nodes[2:]
    for name in nodes:
        _set_state(cluster_env, name, "drain")
    out = tmp_path / "run"
    sbatch = [
        command("ddpimg"), "sbatch", "--site", str(SHORT_NAME_PROFILE), "--runtime", "none",
        "--gpu-request", "none", "--nodes", "1-2", "--gpus-per-node", "1", "--time", "10",
        "--submit", "--", "train", *WHOLE, "--timeout", str(TIMEOUT_S), "--out", str(out),
    ]  # fmt: skip
    job_id = run(sbatch, cluster_env, cwd=tmp_path, timeout=60).stdout.strip()
    assert job_id.isdigit(), job_id
    log = tmp_path / f"ddpimg-{job_id}.out"
    assert job_info(job_id, cluster_env)["NumNodes"] == "1-2"  # what the script asked for
    run(["scontrol", "update", f"JobId={job_id}", "NumNodes=2-2"], cluster_env, timeout=30)
    for name in two:
        _set_state(cluster_env, name, "resume")

    # Rank 1's process is found while the job starts, so that the kill follows the first
    # checkpoint by one poll, however fast the steps come.
    found: list[tuple[int, str]] = []

    def rank_1_runs() -> bool:
        found[:] = [hit] if (hit := _rank_process(job_id, 1)) else []
        return bool(found)

    try:
        wait_until("rank 1 runs", rank_1_runs, KILL_LIMIT_S)
    except AssertionError as err:
        raise AssertionError(f"{err}:\n{_job_processes(job_id)}") from err
    victim, node = found[0]
    assert node in two, node
    deadline = time.monotonic() + KILL_LIMIT_S
    while not candidates(out / CHECKPOINTS):
        assert time.monotonic() < deadline, f"no checkpoint within {KILL_LIMIT_S:g} s"
        time.sleep(0.05)
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    _set_state(cluster_env, node, "drain")  # taken out: the requeued job cannot get it

    # Requeued: back to the script's own minimum, on the node that is left (the others
    # stay drained).
    wait_until(f"job {job_id} is requeued", lambda: _requeued(job_id, cluster_env), 90)
    resize = ["scontrol", "update", f"JobId={job_id}", "NumNodes=1-2", "NumTasks=1"]
    run(resize, cluster_env, timeout=30)
    release_requeued(job_id, cluster_env, restarts=1)
    try:
        info = wait_for_end(job_id, cluster_env, log)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{job_info(job_id, cluster_env)}") from err
    text = log.read_text()
    print(f"kill to the job's end: {time.monotonic() - killed_at:.1f} s")
    assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "1"), text[-4000:]
    named = re.search(
        r"ddpimg: error: rank 0 \(node\d\) gave up at step \d+ \([^)]*\): rank 1 \(host node\d, "
        r"pid \d+\) stopped reporting \d+ s ago \(last report: step \d+, phase \w+\); last "
        rf"valid checkpoint: ({re.escape(str(out))}/checkpoints/step-\d+) \(step (\d+)\)",
        text,
    )
    assert named, text[-4000:]
    assert "ddpimg: a rank was lost (status 137" in text, text[-4000:]
    assert f"ddpimg: requeueing job {job_id} (restart 1 of" in text
    left = next(name for name in two if name != node)
    assert f"ddpimg: job {job_id}, restart 1, nodes {left}" in text, text[-4000:]
    assert not any(f"nodes {name}" in text for name in others)

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["distributed"]["world_size"] == 1
    resumed = manifest["resumed_from"]
    assert f"ddpimg: resuming from {resumed['checkpoint']}" in text
    # The checkpoint rank 0 named as the last valid one is the one the requeued job took.
    assert (resumed["checkpoint"], resumed["step"]) == (named.group(1), int(named.group(2)))
    assert 0 < resumed["step"] < STEPS, f"the run went past step {STEPS} before the kill"
    assert "through its universal form" in text, text[-4000:]
    universal = Path(resumed["checkpoint"]) / "deepspeed" / UNIVERSAL
    assert read(universal).source_world_size == 2
    summary = next(m for m in read_metrics(out) if m["kind"] == "summary")
    assert (summary["world_size"], summary["accumulation_steps"]) == (1, 2)
    assert_within(
        train_losses(out), expected, CONTINUED_TOLERANCE, "2 nodes, a node lost, then 1 node"
    )


def _requeued(job_id: str, env: dict[str, str]) -> bool:
    info = job_info(job_id, env)
    return info.get("JobState") == "PENDING" and info.get("Restarts") == "1"
