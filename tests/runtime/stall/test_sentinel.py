"""The sentinel against real processes: it kills a parent that stopped running, and only
then; it leaves with its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpimg.runtime.stall import sentinel
from ddpimg.runtime.stall.watch import Sentinel

LIMIT_S = 1.5
# A parent that runs a Sentinel and beats it every 0.2 s from a thread, like the watch.
PARENT = f"""
import sys, threading, time
from ddpimg.runtime.stall.watch import Sentinel
guard = Sentinel({LIMIT_S}, "rank 1 on test")
print(guard.process.pid, flush=True)
def beat():
    while True:
        guard.beat()
        time.sleep(0.2)
threading.Thread(target=beat, daemon=True).start()
time.sleep(float(sys.argv[1]))
guard.close()
"""


@pytest.fixture
def parent() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT, "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def _sentinel_pid(proc: subprocess.Popen[str]) -> int:
    assert proc.stdout is not None
    return int(proc.stdout.readline())


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_a_stopped_parent_is_killed_after_the_limit(parent: subprocess.Popen[str]) -> None:
    _sentinel_pid(parent)
    time.sleep(LIMIT_S)  # beating: nothing happens
    assert parent.poll() is None
    stopped = time.monotonic()
    os.kill(parent.pid, signal.SIGSTOP)
    parent.wait(timeout=LIMIT_S + 10)  # a hang guard: 5x the 2.2 s it takes
    waited = time.monotonic() - stopped
    assert parent.returncode == -signal.SIGKILL
    # Not before the limit (the last beat came up to one beat, 0.2 s, before the stop); how
    # late after it is the sentinel's own figure, below, not this machine's speed.
    assert waited >= LIMIT_S - 0.25
    _, stderr = parent.communicate()
    assert f"ddpimg: rank 1 on test (pid {parent.pid}) has not run for 2 s" in stderr
    assert "its sentinel kills it with SIGKILL" in stderr


def test_a_parent_stopped_together_with_its_sentinel_survives(
    parent: subprocess.Popen[str],
) -> None:
    """Ctrl-Z or `scontrol suspend` stop the whole group: a suspended job, not a stall."""
    guard = _sentinel_pid(parent)
    os.killpg(parent.pid, signal.SIGSTOP)
    time.sleep(LIMIT_S + sentinel.OWN_GAP_S + 0.5)
    os.killpg(parent.pid, signal.SIGCONT)
    time.sleep(LIMIT_S + 1)
    assert parent.poll() is None
    assert not _gone(guard)


def test_the_sentinel_leaves_when_its_parent_exits() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PARENT, "0.5"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    guard = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 10
    while not _gone(guard) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(guard)


def test_the_sentinel_outlives_the_signals_that_end_a_step_politely() -> None:
    guard = Sentinel(60, "rank 0 here")
    try:
        time.sleep(0.5)  # let it install its handlers
        for name in sentinel.IGNORED:
            os.kill(guard.process.pid, getattr(signal, name))
        time.sleep(0.3)
        assert guard.process.poll() is None
    finally:
        guard.close()
    assert guard.process.returncode == 0
