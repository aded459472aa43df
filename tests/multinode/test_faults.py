"""Faults across nodes end within the timeout: a rank killed on one node stops every other
rank with a non-zero status and leaves the last checkpoint intact; a node whose ranks never
start is named, with those ranks, by rank 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ddpimg.train.checkpoint.files import CHECKPOINTS, candidates, verify
from tests.engines.netns import NamespaceCluster
from tests.integration.runs import QUICK_TRAIN, command, read_metrics, run
from tests.multinode.conftest import FAIL_TIMEOUT_S, RUN_LIMIT_S, SHORT_NAME_PROFILE

pytestmark = [pytest.mark.multinode, pytest.mark.slurm, pytest.mark.torchrun]

FOUR_RANKS = ["srun", "--nodelist", "node1,node2", "--ntasks-per-node=2", "--kill-on-bad-exit=0"]
LONG_TRAIN = [
    "--data", "synthetic", "--epochs", "1", "--log-every", "1", "--global-batch-size", "64",
    "--train-samples", "60000", "--eval-samples", "256", "--max-steps", "2000", "--seed", "7",
    "--site", str(SHORT_NAME_PROFILE),
]  # fmt: skip
# Each task records its training process's PID and, once that ends, its exit status; train
# runs in the background of the wrapper so that a killed one still gets its status written.
RECORDING_TASK = (
    '"$@" & echo $! > "$REC/pid.$SLURM_PROCID"; wait $!; echo $? > "$REC/status.$SLURM_PROCID"'
)
CHECKPOINT_EVERY = 2
# Start-up (interpreters, torch import) on top of the rendezvous timeout.
STARTUP_ALLOWANCE_S = 60


def _wait_until(
    what: str, ready: Callable[[], bool], limit_s: float, proc: subprocess.Popen[str]
) -> None:
    deadline = time.monotonic() + limit_s
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"the job ended (status {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {limit_s:g} s waiting until {what}")
        time.sleep(0.2)


def test_a_rank_killed_on_one_node_stops_all_others_and_the_checkpoint_survives(
    cluster: NamespaceCluster, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    timeout_s = 30
    rec, out = tmp_path / "rec", tmp_path / "out"
    rec.mkdir()
    cmd = [*FOUR_RANKS, "sh", "-c", RECORDING_TASK, "sh", command("train"), *LONG_TRAIN,
           "--checkpoint-every", str(CHECKPOINT_EVERY), "--timeout", str(timeout_s),
           "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=cluster_env | {"REC": str(rec)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        checkpoints = out / CHECKPOINTS
        _wait_until("two checkpoints were written", lambda: len(candidates(checkpoints)) >= 2,
                    RUN_LIMIT_S, proc)  # fmt: skip
        # Rank 3 runs on node2; rank 0 (metrics, checkpoint marker) on node1.
        victim = int((rec / "pid.3").read_text())
        killed_at = time.time()
        os.kill(victim, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=timeout_s + STARTUP_ALLOWANCE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    statuses = {rank: int((rec / f"status.{rank}").read_text()) for rank in range(4)}
    assert statuses[3] == 128 + signal.SIGKILL
    assert all(statuses[rank] != 0 for rank in (0, 1, 2)), (statuses, stderr[-3000:])
    ended = max((rec / f"status.{rank}").stat().st_mtime for rank in (0, 1, 2))
    assert ended - killed_at < timeout_s, f"the last survivor took {ended - killed_at:.0f} s"
    assert not any(row["kind"] == "summary" for row in read_metrics(out))
    newest = candidates(out / CHECKPOINTS)[0]
    assert verify(newest) is None, f"{newest}: {verify(newest)}"


def test_ranks_that_never_start_are_named_with_their_host(
    cluster: NamespaceCluster, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    """node2's tasks fail before `train` starts (as when its container cannot start)."""
    task = (
        'if [ "$(hostname)" = node2 ]; then echo "$(hostname): cannot start" >&2; exit 1; fi; '
        'exec "$@"'
    )
    cmd = [*FOUR_RANKS, "sh", "-c", task, "sh", command("train"), *QUICK_TRAIN,
           "--site", str(SHORT_NAME_PROFILE), "--timeout", str(FAIL_TIMEOUT_S),
           "--out", str(tmp_path)]  # fmt: skip
    proc = run(cmd, cluster_env, timeout=RUN_LIMIT_S, check=False)
    assert proc.returncode != 0
    assert (
        f"ddpimg: error: 2 of 4 ranks never joined the rendezvous within {FAIL_TIMEOUT_S} s: "
        "ranks 2, 3 (host node2)"
    ) in proc.stderr
    codes = _srun_exit_codes(proc.stderr)
    # Rank 0 gives up with status 3 and waits until rank 1 (node1) has read the verdict, so
    # rank 1 also exits 3; node2's tasks exited 1 before train started.
    assert (codes[0], codes[1], codes[2], codes[3]) == (3, 3, 1, 1), codes


def _srun_exit_codes(stderr: str) -> dict[int, int]:
    """Task -> exit code from srun's "node1: tasks 0-1: Exited with exit code 3" lines."""
    codes = {}
    pattern = r"srun: error: \S+: tasks? ([\d,-]+): Exited with exit code (\d+)"
    for tasks, code in re.findall(pattern, stderr):
        for part in tasks.split(","):
            low, _, high = part.partition("-")
            codes.update(dict.fromkeys(range(int(low), int(high or low) + 1), int(code)))
    return codes
