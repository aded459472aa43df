"""A process's children: listing them, and the launcher's forwarding of signals to them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ddpimg.runtime.children import child_pids, forward_to_children

WAITING_CHILD = """
import signal, sys, time
signal.signal(signal.SIGUSR2, lambda *_: (open(sys.argv[1], "w").write("got it"), sys.exit(0)))
print("ready", flush=True)
time.sleep(60)
"""


def test_forwarded_signal_reaches_the_children(tmp_path: Path) -> None:
    marker = tmp_path / "received"
    child = subprocess.Popen(
        [sys.executable, "-c", WAITING_CHILD, str(marker)], stdout=subprocess.PIPE, text=True
    )
    previous = signal.getsignal(signal.SIGUSR2)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        assert child.pid in child_pids()
        forward_to_children(("USR2",))
        os.kill(os.getpid(), signal.SIGUSR2)
        assert child.wait(timeout=30) == 0
    finally:
        signal.signal(signal.SIGUSR2, previous)
        if child.poll() is None:
            child.kill()
            child.wait()
    assert marker.read_text() == "got it"


def test_child_pids_are_direct_children_only() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert sleeper.pid in child_pids()
        assert child_pids(sleeper.pid) == []
    finally:
        sleeper.kill()
        sleeper.wait()
