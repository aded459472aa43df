"""The batch layout a run is given: per rank, world size, global; worked out once."""

from __future__ import annotations

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.train.batch import BatchLayout
from ddpimg.train.config import TrainConfig


@pytest.mark.parametrize(
    ("batch_size", "global_batch_size", "world_size", "per_rank"),
    [
        (64, None, 1, 64),
        (64, None, 8, 64),
        (3, None, 5, 3),
        (None, 64, 1, 64),
        (None, 64, 4, 16),
        (None, 64, 64, 1),
    ],
)
def test_layout_of_either_batch_option(
    batch_size: int | None, global_batch_size: int | None, world_size: int, per_rank: int
) -> None:
    config = TrainConfig(batch_size=batch_size, global_batch_size=global_batch_size)
    layout = BatchLayout.of(config, world_size)
    assert layout == BatchLayout(per_rank, world_size)
    assert layout.global_size == per_rank * world_size


@pytest.mark.parametrize(
    ("global_batch", "world_size", "message"),
    [
        (
            100,
            3,
            r"--global-batch-size 100 is not divisible by the world size 3\n"
            r"  hint: use a multiple of 3 \(e.g. 99 or 102\), or --batch-size N",
        ),
        (2, 4, r"--global-batch-size 2 is not divisible by the world size 4\n.*\(e.g. 4\)"),
    ],
)
def test_global_batch_must_divide(global_batch: int, world_size: int, message: str) -> None:
    config = TrainConfig(batch_size=None, global_batch_size=global_batch)
    with pytest.raises(DdpimgError, match=message):
        BatchLayout.of(config, world_size)
