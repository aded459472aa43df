"""Failures in the middle of a 2-node run, on the namespace cluster: a rank stopped on one
node is named (with that node) by the rank on the other, and is killed by its sentinel,
all within --timeout + 20 s; a job of `ddpimg sbatch --nodes 1-2` that loses a node stops
cleanly, requeues itself and continues on the remaining node with the losses of an
undisturbed run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ddpimg import exitcodes
from ddpimg.train.checkpoint.files import CHECKPOINTS, candidates
from tests.engines.netns import NamespaceCluster
from tests.integration.runs import QUICK_TRAIN, assert_close, command, read_metrics, run, summary
from tests.integration.stalls import (
    RECORDING_TASK,
    STALL_TRAIN,
    check_bound,
    check_manifest,
    check_named,
    check_sentinel,
    wait_for_checkpoint,
)
from tests.integration.test_sbatch import release_requeued, wait_for_end, wait_until
from tests.multinode.conftest import RUN_LIMIT_S, SHORT_NAME_PROFILE, TIMEOUT_S

pytestmark = [pytest.mark.multinode, pytest.mark.slurm, pytest.mark.torchrun]

TWO_NODES = ["srun", "--nodelist", "node1,node2", "--ntasks-per-node=1", "--kill-on-bad-exit=0"]
SITE = ["--site", str(SHORT_NAME_PROFILE)]


def _start(cmd: list[str], env: dict[str, str], rec: Path) -> subprocess.Popen[str]:
    rec.mkdir()
    return subprocess.Popen(
        [*TWO_NODES, "sh", "-c", RECORDING_TASK, "sh", *cmd],
        env=env | {"REC": str(rec)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _statuses(rec: Path) -> list[int]:
    return [int((rec / f"status.{rank}").read_text()) for rank in (0, 1)]


def test_a_rank_stopped_on_one_node_is_named_by_the_other_node(
    cluster: NamespaceCluster, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    rec, out = tmp_path / "rec", tmp_path / "out"
    proc = _start([command("train"), *STALL_TRAIN, *SITE, "--out", str(out)], cluster_env, rec)
    try:
        wait_for_checkpoint(out, proc, RUN_LIMIT_S)
        victim = int((rec / "pid.1").read_text())  # rank 1 runs on node2
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.monotonic()
        _, stderr = proc.communicate(timeout=120)
        ended_at = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert _statuses(rec) == [exitcodes.RANK_LOST, 128 + signal.SIGKILL], stderr[-4000:]
    check_named(stderr, observer=0, victim=1, victim_pid=victim, victim_host="node2", out=out)
    check_sentinel(stderr, 1, victim, "node2")
    check_manifest(out, 1, "node2")
    check_bound(stopped_at, ended_at)


# The trajectory compared: mnist, 24 steps of a global batch of 256 (slow enough, at about
# 0.1 s a step, to be stopped in the middle), a checkpoint every 4 steps.
STEPS = 24
CONTINUED = [*QUICK_TRAIN, "--max-steps", str(STEPS), "--global-batch-size", "256",
             "--train-samples", str(256 * STEPS), "--checkpoint-every", "4"]  # fmt: skip
SBATCH = [
    "sbatch", "--site", str(SHORT_NAME_PROFILE), "--runtime", "none", "--gpu-request", "none",
    "--gpus-per-node", "1", "--nodes", "1-2", "--time", "10", "--submit",
]  # fmt: skip


def _rank_pid(job_id: str, rank: int) -> int | None:
    """The PID of the training process of task ``rank`` of the job (its sentinel, a child
    with the same variables, left out), from /proc: the nodes share this machine's PIDs."""
    wanted = {f"SLURM_JOB_ID={job_id}".encode(), f"SLURM_PROCID={rank}".encode()}
    for entry in Path("/proc").iterdir():
        try:
            environ = set((entry / "environ").read_bytes().split(b"\0"))
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        program = b" ".join(cmdline[:2])
        if wanted <= environ and b"train" in program and b"sentinel" not in program:
            return int(entry.name)
    return None


def _drain(env: dict[str, str], node: str) -> None:
    """Slurm gives the node to no job from now on (a running one keeps it)."""
    update = ["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=lost-in-a-test"]
    run(update, env, timeout=30)


def _idle(env: dict[str, str]) -> list[str]:
    listed = run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], env, timeout=30).stdout
    return sorted(set(listed.split()) & {"node1", "node2"})


def test_a_job_that_loses_a_node_is_requeued_and_continues_on_the_other(
    cluster: NamespaceCluster, cluster_env: dict[str, str], run_env: dict[str, str],
    tmp_path: Path,
) -> None:  # fmt: skip
    """`ddpimg sbatch --nodes 1-2`: node2 is drained (Slurm will not give it again) and its
    rank killed after a checkpoint; the job's script requeues it, Slurm starts it on node1
    alone, and it goes on from the checkpoint with the losses of one process."""
    straight = tmp_path / "straight"
    run([command("train"), *CONTINUED, "--out", str(straight)], run_env, timeout=RUN_LIMIT_S)
    expected = [m["loss"] for m in read_metrics(straight) if m["kind"] == "train"]

    out = tmp_path / "run"
    argv = [command("ddpimg"), *SBATCH, "--", "train", *CONTINUED, "--timeout",
            str(TIMEOUT_S), "--out", str(out)]  # fmt: skip
    # Slurm gives a range the nodes idle at the start: node3 is kept out, node1 and node2
    # (still completing the previous test's job, maybe) are waited for.
    _drain(cluster_env, "node3")
    job_id = ""
    try:
        wait_until("node1 and node2 are idle", lambda: _idle(cluster_env) == ["node1", "node2"])
        job_id = run(argv, cluster_env, cwd=tmp_path, timeout=60).stdout.strip()
        log = tmp_path / f"ddpimg-{job_id}.out"
        wait_until("a checkpoint is written", lambda: bool(candidates(out / CHECKPOINTS)))
        victim = _rank_pid(job_id, 1)
        assert victim is not None, log.read_text()
        _drain(cluster_env, "node2")
        os.kill(victim, signal.SIGKILL)
        release_requeued(job_id, cluster_env, restarts=1)
        info = wait_for_end(job_id, cluster_env, log)
    finally:
        if job_id:
            run(["scancel", job_id], cluster_env, timeout=30, check=False)
        for node in ("node2", "node3"):
            run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], cluster_env,
                timeout=30, check=False)  # fmt: skip
    text = log.read_text()
    assert (info["JobState"], info["Restarts"], info["NodeList"]) == ("COMPLETED", "1", "node1")
    named = re.search(
        r"ddpimg: error: rank 0 \(node1\) gave up at step \d+ \([^)]*\): rank 1 \(host node2, "
        rf"pid {victim}\) stopped reporting \d+ s ago \(last report: step \d+, phase \w+\); "
        rf"last valid checkpoint: ({re.escape(str(out))}/checkpoints/step-\d+) \(step (\d+)\)",
        text,
    )
    assert named, text[-4000:]
    checkpoint, step = named.group(1), int(named.group(2))
    assert step < STEPS, f"the run went past step {STEPS} before the kill"
    # srun reports the killed task's 137; the run's manifest says a rank was lost
    assert "ddpimg: a rank was lost (status 137, the error above names it)" in text
    assert f"ddpimg: requeueing job {job_id} (restart 1 of 3)" in text
    assert f"ddpimg: resuming from {checkpoint} (epoch 1, step {step})" in text
    lines = [m for m in read_metrics(out) if m["kind"] == "train"]
    assert [m["step"] for m in lines] == list(range(1, STEPS + 1))
    assert summary(out)["world_size"] == 1
    assert_close([m["loss"] for m in lines], expected, 1e-4, "2 nodes, then node1 alone")
