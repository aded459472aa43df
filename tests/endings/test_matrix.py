"""The fault matrix (ddpimg.endings.matrix): every cell documented once, the table in
docs/checkpoints-and-failures.md written from it, and real lines normalized to its form."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ddpimg import exitcodes
from ddpimg.endings.matrix import FAULTS, LAUNCHERS, PHASES, ROWS, expected, normalized, table

PAGE = Path(__file__).resolve().parents[2] / "docs" / "checkpoints-and-failures.md"
BEGIN = "<!-- endings table: the output of python -m ddpimg.endings.matrix -->\n"
END = "<!-- end of the endings table -->\n"


def test_every_cell_is_in_one_row() -> None:
    for fault, phase, launcher in itertools.product(FAULTS, PHASES, LAUNCHERS):
        rows = [
            row for row in ROWS
            if fault in row.faults and phase in row.phases and launcher in row.launchers
        ]  # fmt: skip
        if fault == "raise" and phase == "rendezvous":
            assert not rows  # rank 0's own error before the first step: an error at start
            continue
        assert len(rows) == 1, (fault, phase, launcher, rows)


def test_the_documented_table_is_the_matrix() -> None:
    """``python -m ddpimg.endings.matrix`` prints the table to put between the markers."""
    text = PAGE.read_text()
    assert BEGIN in text
    assert END in text
    documented = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert documented == table()


def test_a_killed_rank_is_5_under_ddpimgs_launcher_and_a_scheduler_signal_75() -> None:
    launcher = LAUNCHERS[0]
    for phase in PHASES:
        for fault in ("SIGKILL", "SIGSEGV"):
            ending = expected(fault, phase, launcher)
            assert ending is not None
            assert ending.status == exitcodes.RANK_LOST
        for fault in ("SIGTERM", "SIGUSR2"):
            ending = expected(fault, phase, launcher)
            assert ending is not None
            assert ending.status == (exitcodes.OK if phase == "final" else exitcodes.PREEMPTED)


@pytest.mark.parametrize(
    ("line", "form"),
    [
        (
            "ddpimg: error: rank 1 (host node7, pid 4242) was killed by SIGKILL: most often",
            "ddpimg: error: rank N (host H, pid P) was killed by SIG: most often",
        ),
        (
            "ddpimg: error: rank 0 (n1.cluster) gave up at step 17 (gloo: a peer closed its "
            "connection): rank 3 (host n2, pid 29082) stopped reporting 4 s ago",
            "ddpimg: error: rank N (H) gave up at step N (...): rank N (host H, pid P) stopped "
            "reporting N s ago",
        ),
        (
            "ddpimg: SIGUSR2: stopped after step 12, checkpoint /o/checkpoints/step-00000012; "
            "exit status 75",
            "ddpimg: SIG: stopped after step N, checkpoint /o/checkpoints/step-N; exit status N",
        ),
    ],
)
def test_lines_normalized(line: str, form: str) -> None:
    assert normalized(line) == form
