"""Slurm time limits: every form sbatch accepts, and what it does not."""

from __future__ import annotations

import pytest

from ddpimg.jobs import JobError, parse_slurm_time


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("90", 5400),
        ("05:30", 330),
        ("01:30:00", 5400),
        ("1-12", 129600),
        ("1-12:30", 131400),
        ("2-00:00:01", 172801),
        ("UNLIMITED", None),
        ("infinite", None),
    ],
)
def test_parse_slurm_time(value: str, seconds: int | None) -> None:
    assert parse_slurm_time(value) == seconds


@pytest.mark.parametrize("value", ["", "1h", "1:2:3:4", "-5", "1-", "12:", "1.5"])
def test_parse_slurm_time_rejects(value: str) -> None:
    with pytest.raises(JobError, match=r"is not a Slurm time limit"):
        parse_slurm_time(value)
