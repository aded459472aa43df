"""A rank stopped by SIGSTOP in the middle of training, under torch elastic (`train
--nproc-per-node 2`) and under srun: the other rank names it (host, pid, last step and
phase, how long ago) with the last valid checkpoint and exits with status 5; the stopped
rank's sentinel kills it; everything has ended within --timeout + 20 s."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from ddpimg import exitcodes
from ddpimg.runtime.children import child_pids
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

START_LIMIT_S = 240
HOST = socket.gethostname().split(".")[0]


def _rank_pid(launcher: int, rank: int) -> int:
    """The PID of the worker of ``launcher`` that runs ``rank``."""
    for pid in child_pids(launcher):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in environ:
            return pid
    raise AssertionError(f"no worker with RANK={rank} under {launcher}")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.torchrun
def test_a_stopped_rank_under_torch_elastic_is_named_and_killed(
    tmp_path: Path, run_env: dict[str, str]
) -> None:
    out = tmp_path / "out"
    cmd = [command("train"), "--nproc-per-node", "2", *STALL_TRAIN, "--out", str(out)]
    proc = subprocess.Popen(
        cmd, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for_checkpoint(out, proc, START_LIMIT_S)
        victim = _rank_pid(proc.pid, 1)
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.monotonic()
        _, stderr = proc.communicate(timeout=120)
        ended_at = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == exitcodes.RANK_LOST, stderr[-4000:]
    assert not _alive(victim)
    check_named(stderr, observer=0, victim=1, victim_pid=victim, victim_host=HOST, out=out)
    check_sentinel(stderr, 1, victim, HOST)
    check_manifest(out, 1, HOST)
    check_bound(stopped_at, ended_at)


@pytest.mark.slurm
def test_a_stopped_srun_task_is_named_and_killed(tmp_path: Path, slurm_env: dict[str, str]) -> None:
    rec, out = tmp_path / "rec", tmp_path / "out"
    rec.mkdir()
    cmd = ["srun", "-n", "2", "--kill-on-bad-exit=0", "sh", "-c", RECORDING_TASK, "sh",
           command("train"), *STALL_TRAIN, "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=slurm_env | {"REC": str(rec)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for_checkpoint(out, proc, START_LIMIT_S)
        victim = int((rec / "pid.1").read_text())
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.monotonic()
        _, stderr = proc.communicate(timeout=120)
        ended_at = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    statuses = [int((rec / f"status.{rank}").read_text()) for rank in (0, 1)]
    assert statuses == [exitcodes.RANK_LOST, 128 + signal.SIGKILL], stderr[-4000:]
    check_named(stderr, observer=0, victim=1, victim_pid=victim, victim_host=HOST, out=out)
    check_sentinel(stderr, 1, victim, HOST)
    check_manifest(out, 1, HOST)
    check_bound(stopped_at, ended_at)
