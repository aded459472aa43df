"""``BatchLayout``: how many samples each rank takes per step, on how many ranks, and the
global batch they make. Worked out once, where a run starts (``run_training``), from
``--batch-size`` or ``--global-batch-size`` and the world size; the loop, the data shard,
the strategies, the trainers and the checkpoints read it and divide or multiply nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError

if TYPE_CHECKING:
    from ddpimg.train.config import TrainConfig


@dataclass(frozen=True)
class BatchLayout:
    """``per_rank`` samples on each of ``world_size`` ranks per optimizer step."""

    per_rank: int
    world_size: int

    @property
    def global_size(self) -> int:
        """Samples per step over all ranks: what the loss is averaged over."""
        return self.per_rank * self.world_size

    @classmethod
    def of(cls, config: TrainConfig, world_size: int) -> BatchLayout:
        """The layout ``config``'s batch option gives on ``world_size`` ranks; a DdpimgError
        when ``--global-batch-size`` does not split evenly over them."""
        if config.batch_size is not None:
            return cls(config.batch_size, world_size)
        total = config.global_batch_size
        if total is None:
            raise DdpimgError(
                "neither --batch-size nor --global-batch-size is set",
                hint="give one of them",
            )
        if total % world_size:
            lower = total // world_size * world_size
            higher = lower + world_size
            suggestion = f"{lower} or {higher}" if lower else str(higher)
            raise DdpimgError(
                f"--global-batch-size {total} is not divisible by the world size {world_size}",
                hint=f"use a multiple of {world_size} (e.g. {suggestion}), or --batch-size N "
                "for N samples on every rank",
            )
        return cls(total // world_size, world_size)
