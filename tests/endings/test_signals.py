"""A rank killed by a signal: the name, the usual cause, the status (ddpimg.endings.signals)."""

from __future__ import annotations

import signal

import pytest

from ddpimg import exitcodes
from ddpimg.endings.signals import killed_message, killed_status, signal_cause, signal_name


@pytest.mark.parametrize(
    ("number", "name"),
    [(9, "SIGKILL"), (11, "SIGSEGV"), (7, "SIGBUS"), (6, "SIGABRT"), (99, "signal 99")],
)
def test_signal_names(number: int, name: str) -> None:
    assert signal_name(number) == name


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("SIGKILL", "the out-of-memory killer"),
        ("SIGSEGV", "a crash in native code"),
        ("SIGBUS", "a crash in native code"),
        ("SIGABRT", "an abort in native code"),
        ("SIGTERM", "did not act on"),
        ("SIGWINCH", "a signal from outside, or a crash"),
    ],
)
def test_each_signal_has_its_usual_cause(name: str, words: str) -> None:
    assert words in signal_cause(name)


def test_a_killed_rank_is_a_lost_rank_except_for_ctrl_c() -> None:
    assert killed_status(signal.SIGKILL) == exitcodes.RANK_LOST
    assert killed_status(signal.SIGSEGV) == exitcodes.RANK_LOST
    assert killed_status(signal.SIGINT) == exitcodes.INTERRUPTED


def test_the_message_names_rank_host_pid_and_signal() -> None:
    message, hint = killed_message(3, "node2", 4242, signal.SIGKILL)
    assert message.startswith("rank 3 (host node2, pid 4242) was killed by SIGKILL: ")
    assert "on node2" in hint
    assert "sacct" in hint
    message, hint = killed_message(3, "node2", None, signal.SIGSEGV)
    assert message.startswith("rank 3 (host node2) was killed by SIGSEGV: ")
    assert "PYTHONFAULTHANDLER=1" in hint
