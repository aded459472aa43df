from __future__ import annotations

import pytest

from ddpimg.errors import DataError
from ddpimg.train.tasks.datasets import sample_count


@pytest.mark.parametrize(("requested", "count"), [(None, 10), (1, 1), (10, 10)])
def test_sample_count(requested: int | None, count: int) -> None:
    assert sample_count(10, requested, "--train-samples", "training", "the set") == count


def test_more_than_available_is_named() -> None:
    with pytest.raises(
        DataError,
        match=r"--eval-samples 11 is more than the 10 evaluation samples in the set\n"
        r"  hint: give at most 10, or leave --eval-samples out",
    ):
        sample_count(10, 11, "--eval-samples", "evaluation", "the set")
