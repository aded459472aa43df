"""A failure in the middle of a 2-node run, on the namespace cluster: a rank stopped on one
node is named (with that node) by the rank on the other, and is killed by its sentinel,
all within --timeout + 20 s. (A node lost with its rank, the job then going on with the
losses of an undisturbed run on the node that is left: test_node_range.py, end to end under
sbatch.)"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ddpimg import exitcodes
from tests.engines.netns import NamespaceCluster
from tests.integration.runs import command
from tests.integration.stalls import (
    RECORDING_TASK,
    STALL_TRAIN,
    check_bound,
    check_manifest,
    check_named,
    check_sentinel,
    wait_for_checkpoint,
)
from tests.multinode.conftest import RUN_LIMIT_S, SHORT_NAME_PROFILE

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
