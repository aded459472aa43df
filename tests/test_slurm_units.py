"""Slurm time limits and memory sizes: every form sbatch accepts, and what it does not."""

from __future__ import annotations

import pytest

from ddpimg.errors import JobError, ProfileError
from ddpimg.slurm_units import format_slurm_memory, parse_slurm_memory, parse_slurm_time


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


def test_the_error_class_is_the_callers() -> None:
    with pytest.raises(ProfileError, match=r"^partitions.gpu.max_time: '3 days' is not a Slurm"):
        parse_slurm_time("3 days", "partitions.gpu.max_time", ProfileError)


@pytest.mark.parametrize(
    ("value", "mib"),
    [("320G", 320 * 1024), ("320g", 320 * 1024), ("4096", 4096), ("512M", 512), ("1T", 1024**2),
     ("2048K", 2), ("0", 0)],
)  # fmt: skip
def test_parse_slurm_memory(value: str, mib: float) -> None:
    assert parse_slurm_memory(value) == mib


@pytest.mark.parametrize("value", ["", "G", "1.5G", "80GB", "-1G", "1 G"])
def test_parse_slurm_memory_rejects(value: str) -> None:
    with pytest.raises(JobError, match=r"is not a Slurm memory size"):
        parse_slurm_memory(value)


@pytest.mark.parametrize(("mib", "text"), [(320 * 1024, "320G"), (1536, "1536M"), (0, "0M")])
def test_format_slurm_memory(mib: float, text: str) -> None:
    assert format_slurm_memory(mib) == text
    assert parse_slurm_memory(text) == mib
