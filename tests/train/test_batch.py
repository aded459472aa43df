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


@pytest.mark.parametrize(
    ("batch_size", "global_batch_size", "micro", "world_size", "expected"),
    [
        (None, 512, 8, 1, BatchLayout(512, 1, 8)),
        (None, 512, 8, 4, BatchLayout(128, 4, 8)),
        (None, 64, 16, 4, BatchLayout(16, 4)),  # the whole share in one pass
        (32, None, 4, 3, BatchLayout(32, 3, 4)),
    ],
)
def test_micro_batches_give_the_accumulation_steps(
    batch_size: int | None,
    global_batch_size: int | None,
    micro: int,
    world_size: int,
    expected: BatchLayout,
) -> None:
    config = TrainConfig(
        batch_size=batch_size, global_batch_size=global_batch_size, micro_batch_size=micro
    )
    layout = BatchLayout.of(config, world_size)
    assert layout == expected
    assert layout.micro == micro
    assert layout.accumulation * layout.micro == layout.per_rank
    assert layout.per_forward == micro * world_size
    assert layout.global_size == (global_batch_size or (batch_size or 0) * world_size)


def test_without_micro_batches_one_pass_takes_the_share() -> None:
    layout = BatchLayout.of(TrainConfig(batch_size=None, global_batch_size=64), 4)
    assert (layout.micro, layout.accumulation, layout.per_forward) == (16, 1, 64)


@pytest.mark.parametrize(
    ("batch_size", "global_batch_size", "micro", "world_size", "message"),
    [
        (
            None,
            512,
            24,
            4,
            r"--micro-batch-size 24 does not divide the 128 samples each of 4 ranks takes of "
            r"--global-batch-size 512\n  hint: use a --micro-batch-size that divides 128 "
            r"\(e.g. 8 or 16\), or a --global-batch-size that is a multiple of 24 x 4 ranks "
            r"\(e.g. 480 or 576\)",
        ),
        (
            None,
            16,
            32,
            2,
            r"--micro-batch-size 32 does not divide the 8 samples each of 2 ranks takes of "
            r"--global-batch-size 16\n  hint: use a --micro-batch-size that divides 8 "
            r"\(e.g. 4 or 8\), or a --global-batch-size that is a multiple of 32 x 2 ranks "
            r"\(e.g. 64\)",
        ),
        (
            30,
            None,
            8,
            2,
            r"--micro-batch-size 8 does not divide --batch-size 30 \(samples per rank and step, "
            r"on 2 ranks\)\n  hint: use a --micro-batch-size that divides 30 \(e.g. 5 or 6\), "
            r"or a --batch-size that is a multiple of 8 \(e.g. 24 or 32\)",
        ),
    ],
)
def test_a_micro_batch_that_does_not_divide_is_named(
    batch_size: int | None, global_batch_size: int | None, micro: int, world_size: int, message: str
) -> None:
    config = TrainConfig(
        batch_size=batch_size, global_batch_size=global_batch_size, micro_batch_size=micro
    )
    with pytest.raises(DdpimgError, match=message):
        BatchLayout.of(config, world_size)


def test_a_micro_batch_below_one_is_refused_with_the_flag() -> None:
    with pytest.raises(DdpimgError, match=r"--micro-batch-size must be at least 1, got 0"):
        TrainConfig(micro_batch_size=0)
