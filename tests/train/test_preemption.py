"""Preemption signals: parsing, the per-process flag, the ranks' agreement (1-rank group)
and the launcher's forwarding to its workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.runtime.context import DistContext
from ddpimg.train.preemption import (
    PreemptionWatch,
    child_pids,
    forward_to_children,
    parse_signals,
)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("USR2,TERM", ("USR2", "TERM")),
        ("sigusr2", ("USR2",)),
        (" TERM , SIGINT ", ("TERM", "INT")),
        ("TERM,term", ("TERM",)),
        ("none", ()),
        ("NONE", ()),
    ],
)
def test_parse_signals(text: str, names: tuple[str, ...]) -> None:
    assert parse_signals(text) == names


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("USR1", r"--preempt-signals 'USR1': SIGUSR1 is refused\n  hint: NCCL may handle SIGUSR1"),
        ("TERM,SIGKILL", r"SIGKILL is refused\n  hint: SIGKILL cannot be caught"),
        ("USR2,", r"--preempt-signals 'USR2,' has an empty name\n  hint: give names separated"),
        ("", r"--preempt-signals '' has an empty name"),
        ("USR3", r"--preempt-signals 'USR3': 'USR3' is not a signal name\n  hint: use names"),
        ("Signals", r"'Signals' is not a signal name"),
    ],
)
def test_bad_signal_lists_are_named(text: str, message: str) -> None:
    with pytest.raises(DdpimgError, match=message):
        parse_signals(text)


def test_watch_records_the_first_signal_and_restores_the_handlers() -> None:
    before = signal.getsignal(signal.SIGUSR2)
    with PreemptionWatch(("USR2", "TERM"), check_every=1) as watch:
        assert watch.received is None
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGUSR2)
        assert watch.received == "SIGTERM"
    assert signal.getsignal(signal.SIGUSR2) == before


def test_agreement_happens_at_check_steps_and_epoch_ends(ctx: DistContext) -> None:
    with PreemptionWatch(("USR2",), check_every=4) as watch:
        assert not watch.agreed(4, ctx.device)
        os.kill(os.getpid(), signal.SIGUSR2)
        assert not watch.agreed(5, ctx.device)
        assert watch.agreed(6, ctx.device, epoch_end=True)
        assert watch.agreed(8, ctx.device)


def test_no_signals_never_stops(ctx: DistContext) -> None:
    watch = PreemptionWatch((), check_every=1)
    watch.received = "SIGTERM"
    assert not watch.agreed(1, ctx.device, epoch_end=True)


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
