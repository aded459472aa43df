"""The --nproc-per-node launcher's verdict from its workers' exits, in the order it saw
them (ddpimg.endings.workers): a table of exits -> status and the line it prints."""

from __future__ import annotations

import pytest

from ddpimg import exitcodes
from ddpimg.endings.workers import WorkerExit, local_verdict

KILL, SEGV, TERM, INT = -9, -11, -15, -2


def exits(*codes: tuple[int, int]) -> list[WorkerExit]:
    return [WorkerExit(rank, code, 1000 + rank, "node7") for rank, code in codes]


@pytest.mark.parametrize(
    ("seen", "status", "cause_rank"),
    [
        # Rank 1 killed (the out-of-memory killer); the survivor named it (5), or took the
        # agent's SIGTERM for a preemption (75, the race of issue 54), or ended by it.
        (((1, KILL), (0, 5)), exitcodes.RANK_LOST, 1),
        (((1, KILL), (0, 75)), exitcodes.RANK_LOST, 1),
        (((1, KILL), (0, TERM)), exitcodes.RANK_LOST, 1),
        (((1, SEGV), (0, 5)), exitcodes.RANK_LOST, 1),
        # The survivor's consequence seen first (a slow poll) decides nothing.
        (((0, 5), (1, KILL)), exitcodes.RANK_LOST, 1),
        (((0, 75), (1, SEGV)), exitcodes.RANK_LOST, 1),
        # A rank's own error first: its status, whatever the others then did.
        (((0, 1), (1, 5)), exitcodes.TRAINING_FAILED, 0),
        (((1, 1), (0, 5)), exitcodes.TRAINING_FAILED, 1),
        (((1, 1), (0, 75)), exitcodes.TRAINING_FAILED, 1),
        (((0, 1), (1, KILL)), exitcodes.TRAINING_FAILED, 0),  # the agent's SIGKILL, 30 s on
        (((0, 2), (1, 2)), exitcodes.USAGE, 0),
        (((1, 2), (0, 5)), exitcodes.USAGE, 1),
        (((0, 7),), 7, 0),  # a script's own sys.exit(7)
        # Consequences only: lost > preempted > interrupted.
        (((0, 5), (1, 5)), exitcodes.RANK_LOST, None),
        (((0, 75), (1, 75)), exitcodes.PREEMPTED, None),
        (((0, 130), (1, 75)), exitcodes.PREEMPTED, None),
        (((0, 130), (1, 130)), exitcodes.INTERRUPTED, None),
        # A worker killed by Ctrl-C's SIGINT (a script that reset its handler).
        (((1, INT), (0, 130)), exitcodes.INTERRUPTED, 1),
        # The agent's SIGTERM to a worker still in its interpreter's shutdown after another
        # ended (its handlers are gone by then): a consequence, as the 75 before it.
        (((1, 75), (0, TERM)), exitcodes.PREEMPTED, None),
        (((1, 5), (0, TERM)), exitcodes.RANK_LOST, None),
        # A SIGTERM seen first came from outside, to a worker that does not act on it.
        (((0, TERM), (1, 5)), exitcodes.RANK_LOST, 0),
    ],
)
def test_the_first_cause_in_the_agents_order_decides(
    seen: tuple[tuple[int, int], ...], status: int, cause_rank: int | None
) -> None:
    verdict = local_verdict(exits(*seen))
    assert verdict.status == status
    assert (verdict.cause.rank if verdict.cause else None) == cause_rank


def test_a_killed_rank_is_named_with_its_host_pid_signal_and_cause() -> None:
    verdict = local_verdict(exits((1, KILL), (0, 75)))
    assert verdict.error
    assert verdict.message is not None
    assert verdict.hint is not None
    assert verdict.message.startswith(
        "rank 1 (host node7, pid 1001) was killed by SIGKILL: most often the out-of-memory killer"
    )
    assert "dmesg" in verdict.hint
    assert "MaxRSS" in verdict.hint
    assert "--resume auto" in verdict.hint


def test_a_script_rank_killed_is_told_how_a_script_continues() -> None:
    verdict = local_verdict(exits((1, SEGV)), script=True)
    assert verdict.message is not None
    assert verdict.hint is not None
    assert "was killed by SIGSEGV: a crash in native code" in verdict.message
    assert "run the same command again" in verdict.hint


def test_an_own_error_gets_a_closing_line_naming_the_rank() -> None:
    verdict = local_verdict(exits((1, 1), (0, 5)))
    assert not verdict.error
    assert verdict.message == (
        "rank 1 (host node7, pid 1001) failed with exit status 1 (its own error, above); "
        "the launcher stopped the other ranks"
    )


@pytest.mark.parametrize("code", [2, 3, 5, 75, 130])
def test_statuses_a_worker_explained_get_no_second_line(code: int) -> None:
    assert local_verdict(exits((0, code))).message is None


def test_the_same_exits_give_the_same_verdict_every_time() -> None:
    """Pure: the verdict depends on the exits alone (what makes a matrix cell's line stable)."""
    seen = exits((1, KILL), (0, 5))
    assert len({local_verdict(seen) for _ in range(5)}) == 1


def test_the_agents_sigkill_30_s_after_the_first_exit_is_no_cause() -> None:
    """A worker that ignored the agent's SIGTERM is killed 30 s later: the first exit
    decides; a rank killed a few seconds after the first exit (a sentinel's SIGKILL) is
    named."""
    late = [WorkerExit(0, 5, 10, "n", 1000.0), WorkerExit(1, KILL, 11, "n", 1031.0)]
    assert local_verdict(late) == local_verdict(late[:1])
    soon = [WorkerExit(0, 5, 10, "n", 1000.0), WorkerExit(1, KILL, 11, "n", 1012.0)]
    verdict = local_verdict(soon)
    assert verdict.status == exitcodes.RANK_LOST
    assert verdict.cause == soon[1]
