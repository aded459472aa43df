"""``--preempt-signals``: the names it takes, and the named error of every bad list."""

from __future__ import annotations

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.train.preempt_signals import parse_signals


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
