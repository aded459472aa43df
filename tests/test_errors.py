"""The one error path: how a user error reads, which exit status it gets, and that library
code catching ValueError cannot swallow it."""

from __future__ import annotations

import io

import pytest

from ddpimg import exitcodes
from ddpimg.errors import (
    DdpimgError,
    JobError,
    LauncherError,
    RankLostError,
    RendezvousError,
    printable,
    report,
)


def test_report_prints_message_then_indented_hint() -> None:
    stream = io.StringIO()
    report(LauncherError("RANK=9 is not below WORLD_SIZE=4", hint="unset RANK"), stream=stream)
    report("doctor: rank 1 on n1: no ib0", stream=stream)
    assert stream.getvalue() == (
        "ddpimg: error: RANK=9 is not below WORLD_SIZE=4\n  hint: unset RANK\n"
        "ddpimg: error: doctor: rank 1 on n1: no ib0\n"
    )


def test_an_error_is_printed_once_however_many_handlers_it_reaches() -> None:
    """A rank prints rank 0's refusal as soon as it learns it (its launcher may end it once
    another rank has exited); the command's own handler then adds nothing."""
    stream = io.StringIO()
    refused = DdpimgError("--out x holds a completed run", hint="use another --out")
    report(refused, stream=stream)
    report(refused, stream=stream)
    assert stream.getvalue() == (
        "ddpimg: error: --out x holds a completed run\n  hint: use another --out\n"
    )


@pytest.mark.parametrize(
    ("err", "status"),
    [
        (KeyboardInterrupt(), exitcodes.INTERRUPTED),
        (RendezvousError("1 of 2 ranks never joined"), exitcodes.RENDEZVOUS_FAILED),
        (RankLostError("rank 1 (host n2) stopped reporting"), exitcodes.RANK_LOST),
        (LauncherError("bad RANK"), exitcodes.USAGE),
        (JobError("no --time"), exitcodes.USAGE),
        (SystemExit(75), 75),
        (SystemExit("a message"), exitcodes.TRAINING_FAILED),
        (RuntimeError("NCCL error"), exitcodes.TRAINING_FAILED),
    ],
)
def test_each_outcome_has_one_exit_status(err: BaseException, status: int) -> None:
    assert exitcodes.for_error(err) == status


def test_a_user_error_is_not_caught_as_a_value_error() -> None:
    def load() -> None:
        try:
            raise DdpimgError("checkpoint from another run", hint="use --resume none")
        except ValueError:  # what a broad wrapper around library code catches
            raise AssertionError("the user error was re-worded") from None

    with pytest.raises(DdpimgError, match="checkpoint from another run"):
        load()


def test_names_in_an_error_reach_the_terminal_escaped() -> None:
    """A file or member name with escape sequences or line breaks once reached the terminal
    raw: it could clear the screen, recolour it, or print a fake line of its own."""
    name = "shard-\x1b[2J\x1b[31m\rx.tar\nddpimg: error: all is well\u202e"
    stream = io.StringIO()
    report(DdpimgError(f"--data: {name} cannot be read", hint=f"remove {name}"), stream=stream)
    text = stream.getvalue()
    assert text == (
        "ddpimg: error: --data: shard-\\x1b[2J\\x1b[31m\\rx.tar\\nddpimg: error: all is well"
        "\\u202e cannot be read\n  hint: remove shard-\\x1b[2J\\x1b[31m\\rx.tar\\nddpimg: "
        "error: all is well\\u202e\n"
    )
    assert all(char.isprintable() for char in text.replace("\n", ""))


def test_indented_continuation_lines_of_a_message_stay_lines() -> None:
    stream = io.StringIO()
    report(JobError("2 problems with this job:\n  1. no --time\n  2. no --nodes"), stream=stream)
    assert stream.getvalue() == (
        "ddpimg: error: 2 problems with this job:\n  1. no --time\n  2. no --nodes\n"
    )
    assert printable("caf\xe9 \udcff") == "caf\xe9 \\xff"  # undecodable byte of a name
