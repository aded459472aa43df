"""Who is named, and how the message of a surviving rank reads."""

from __future__ import annotations

import pytest

from ddpimg.runtime.stall.record import ProgressRecord
from ddpimg.runtime.stall.verdict import LostRank, Verdict, describe, judge, rank_ranges

NOW = 1000.0
STALE = 3.0


def record(
    rank: int, seq: int = 10, step: int = 4, phase: str = "collective", **kw: object
) -> ProgressRecord:
    values: dict[str, object] = {
        "host": f"node{rank // 2 + 1}", "pid": 100 + rank, "since": NOW - 20, "beat": NOW - 0.5,
    } | kw  # fmt: skip
    return ProgressRecord(rank=rank, seq=seq, step=step, phase=phase, **values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("records", "lost", "waiting"),
    [
        # everyone reports, all at the same point: nobody to name
        ({0: record(0), 1: record(1)}, [], [0, 1]),
        # a report older than STALE: silent
        ({0: record(0), 1: record(1, phase="forward", beat=NOW - 21)}, [(1, "silent")], [0]),
        # just within STALE: still alive
        ({0: record(0), 1: record(1, beat=NOW - 2.9)}, [], [0, 1]),
        # never reported
        ({0: record(0), 1: None}, [(1, "unknown")], [0]),
        # published its own error
        ({0: record(0), 1: record(1, state="failed", error="ValueError: x")}, [(1, "failed")], [0]),
        # alive, but at an earlier point of the run than the others
        ({0: record(0), 1: record(1, seq=7, phase="data"), 2: record(2)}, [(1, "behind")], [0, 2]),
        # "behind" only counts when nobody failed or went silent
        (
            {0: record(0), 1: record(1, seq=7), 2: record(2, beat=NOW - 30)},
            [(2, "silent")],
            [0, 1],
        ),
        # a rank that gave up, or finished, was waiting, whatever its report's age
        (
            {0: record(0, state="gave_up", beat=NOW - 60), 1: record(1, state="done", seq=3)},
            [],
            [0, 1],
        ),
    ],
)
def test_judge(
    records: dict[int, ProgressRecord | None], lost: list[tuple[int, str]], waiting: list[int]
) -> None:
    verdict = judge(records, len(records), NOW, STALE, judged_by=0)
    assert [(item.rank, item.how) for item in verdict.lost] == lost
    assert list(verdict.waiting) == waiting


@pytest.mark.parametrize(
    ("ranks", "text"),
    [([], ""), ([3], "3"), ([0, 1, 2, 5, 7, 8], "0-2, 5, 7-8"), ([4, 2, 3, 3], "2-4")],
)
def test_rank_ranges(ranks: list[int], text: str) -> None:
    assert rank_ranges(ranks) == text


def test_the_message_names_the_silent_rank_its_host_step_phase_and_age() -> None:
    records = {0: record(0), 1: record(1, seq=9, phase="forward", step=31, beat=NOW - 21.2)}
    verdict = judge(records, 2, NOW, STALE, judged_by=0)
    message, hint = describe(
        verdict,
        observer=0,
        host="node1",
        step=31,
        cause="gloo: Timed out waiting 20000ms for recv operation to complete",
        now=NOW + 0.4,
        checkpoint=("/runs/a/checkpoints/step-00000030", 30),
    )
    assert message == (
        "rank 0 (node1) gave up at step 31 (gloo: Timed out waiting 20000ms for recv "
        "operation to complete): rank 1 (host node1, pid 101) stopped reporting 22 s ago (last "
        "report: step 31, phase forward); last valid checkpoint: "
        "/runs/a/checkpoints/step-00000030 (step 30)"
    )
    assert hint.startswith("look at node1 (that rank's log; dmesg: GPU Xid errors")
    assert "--resume auto" in hint


def test_ranks_lost_alike_are_grouped_by_host_and_the_other_waiters_listed() -> None:
    records = {rank: record(rank) for rank in range(6)}
    for rank in (2, 3):
        records[rank] = record(rank, beat=NOW - 40 + rank)  # node2, both silent
    verdict = judge(records, 6, NOW, STALE, judged_by=4)
    message, _ = describe(
        verdict, observer=4, host="node3", step=4, cause="c", now=NOW, checkpoint=None,
        flight_recorder="/runs/a/nccl-trace",
    )  # fmt: skip
    assert message == (
        "rank 4 (node3) gave up at step 4 (c): ranks 2-3 (host node2) stopped reporting 37 s "
        "ago (last report: step 4, phase collective); also waiting: ranks 0-1, 5; no "
        "checkpoint written yet (a rerun starts over); NCCL flight recorder dumps: "
        "/runs/a/nccl-trace/rank_<N> (read them with `torchfrtrace /runs/a/nccl-trace`)"
    )


@pytest.mark.parametrize(
    ("verdict", "text", "hint"),
    [
        (
            Verdict(
                0, NOW, (LostRank(1, "failed", "n2", 7, 3, "forward", NOW, NOW, "OSError: x"),)
            ),
            "rank 1 (host n2, pid 7) failed at step 3 in phase forward: OSError: x",
            "the failing rank's own error is in its log (on n2)",
        ),
        (
            Verdict(0, NOW, (LostRank(1, "behind", "n2", 7, 3, "data", NOW, NOW - 25),)),
            "rank 1 (host n2, pid 7) still reports, but is stuck at step 3 in phase data for 25 s",
            "`py-spy dump --pid 7` on n2",
        ),
        (
            Verdict(0, NOW, (LostRank(1, "unknown"),)),
            "rank 1 never reported (host unknown)",
            "look at the host of that rank",
        ),
        (
            Verdict(1, NOW, store="node1:29400", store_timeout_s=5),
            "the rendezvous store at node1:29400 did not answer within 5 s",
            "look at node1 (rank 0's log",
        ),
        (
            Verdict(0, NOW, (), (0, 1)),
            "every rank still reports, all at the same point: the collective itself failed",
            "`srun ddpimg doctor` measures each node's links",
        ),
    ],
)
def test_each_way_of_being_lost_reads_and_hints_its_own_way(
    verdict: Verdict, text: str, hint: str
) -> None:
    message, given = describe(
        verdict, observer=0, host="n1", step=3, cause="c", now=NOW, checkpoint=None
    )
    assert f"gave up at step 3 (c): {text}" in message
    assert hint in given


def test_a_verdict_survives_the_store() -> None:
    verdict = judge({0: record(0), 1: record(1, beat=NOW - 9)}, 2, NOW, STALE, judged_by=1)
    assert Verdict.from_json(verdict.to_json()) == verdict
    assert verdict.hosts == ["node1"]
