"""``BatchLayout``: how many samples each rank takes per optimizer step, in how many forward
passes (micro-batches, whose gradients it accumulates), on how many ranks, and the global
batch they make. Worked out once, where a run starts (``run_training``), from
``--batch-size`` or ``--global-batch-size``, ``--micro-batch-size`` and the world size; the
loop, the data shard, the strategies, the trainers and the checkpoints read it and divide
or multiply nothing.

The global batch is what defines a run (its loss is the mean over it); the world size and
the micro-batch only decide how it is computed: 8 ranks x 16 samples, or 2 ranks x 4
micro-batches of 16, or 1 rank x 8 micro-batches of 16 give the same step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError

if TYPE_CHECKING:
    from ddpimg.train.config import TrainConfig


@dataclass(frozen=True)
class BatchLayout:
    """``per_rank`` samples on each of ``world_size`` ranks per optimizer step, taken in
    forward passes of ``micro`` samples (``per_rank`` when 0: no accumulation)."""

    per_rank: int
    world_size: int
    micro: int = 0

    def __post_init__(self) -> None:
        micro = self.micro or self.per_rank
        if micro < 1 or self.per_rank % micro:
            raise ValueError(f"a micro-batch of {self.micro} does not divide {self.per_rank}")
        object.__setattr__(self, "micro", micro)

    @property
    def global_size(self) -> int:
        """Samples per step over all ranks: what the loss is averaged over."""
        return self.per_rank * self.world_size

    @property
    def accumulation(self) -> int:
        """Forward and backward passes per rank and optimizer step."""
        return self.per_rank // self.micro

    @property
    def per_forward(self) -> int:
        """Samples in one forward pass over all ranks: what a layer that takes statistics
        across ranks (a synchronised BatchNorm) sees at once."""
        return self.micro * self.world_size

    @classmethod
    def of(cls, config: TrainConfig, world_size: int) -> BatchLayout:
        """The layout ``config``'s batch options give on ``world_size`` ranks; a DdpimgError
        when ``--global-batch-size`` does not split evenly over them, or when
        ``--micro-batch-size`` does not divide what each rank takes."""
        per_rank = cls._per_rank(config, world_size)
        micro = config.micro_batch_size
        if micro is None or micro == per_rank:
            return cls(per_rank, world_size)
        if micro > per_rank or per_rank % micro:
            raise _micro_error(config, per_rank, world_size, micro)
        return cls(per_rank, world_size, micro)

    @staticmethod
    def _per_rank(config: TrainConfig, world_size: int) -> int:
        if config.batch_size is not None:
            return config.batch_size
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
        return total // world_size


def _micro_error(config: TrainConfig, per_rank: int, world_size: int, micro: int) -> DdpimgError:
    """The error of a micro-batch that does not divide a rank's share of the step: it names
    the three numbers and offers micro-batches, and batches, that fit."""
    fitting = [d for d in range(1, min(micro, per_rank) + 1) if per_rank % d == 0][-2:]
    smaller = " or ".join(map(str, fitting))
    if config.global_batch_size is None:
        share = f"--batch-size {per_rank} (samples per rank and step, on {world_size} ranks)"
        batches = [b for b in (per_rank // micro * micro, (per_rank // micro + 1) * micro) if b]
        larger = f"a --batch-size that is a multiple of {micro}"
    else:
        total = config.global_batch_size
        share = (
            f"the {per_rank} samples each of {world_size} ranks takes of "
            f"--global-batch-size {total}"
        )
        unit = micro * world_size
        batches = [b for b in (total // unit * unit, (total // unit + 1) * unit) if b]
        larger = f"a --global-batch-size that is a multiple of {micro} x {world_size} ranks"
    return DdpimgError(
        f"--micro-batch-size {micro} does not divide {share}",
        hint=f"use a --micro-batch-size that divides {per_rank} (e.g. {smaller}), or {larger} "
        f"(e.g. {' or '.join(map(str, batches))})",
    )
