"""Which samples each rank sees, fixed by the global batch and never by the rank count.

Training: each epoch visits the training set in the order of a permutation drawn from a
generator seeded by (seed, epoch); global batch i is ``order[i*G:(i+1)*G]`` (the incomplete
last one is dropped) and rank r takes rows ``[r*b:(r+1)*b]`` of it (``BatchLayout``: b per
rank, G global), in micro-batches of m rows: its j-th forward pass takes rows
``[r*b + j*m : r*b + (j+1)*m]``.
So the union of the rank slices of a step is the single-process batch of that step, and the
rows of a forward pass depend on the micro-batch's place in the global batch alone: one rank
with two micro-batches of m sees, in order, the rows that two ranks of m see at once.

Evaluation: rank r takes a contiguous shard (sizes differ by at most one); every rank runs
the same number of batches, some possibly empty, so collectives inside a wrapped model's
forward (ZeRO-3 gathers) stay matched. No sample is repeated to pad a shard (as
DistributedSampler does): every sample is evaluated exactly once over all ranks. An
evaluation of part of the set (a short run's) takes samples spread evenly over it, the
same ones whatever the rank count: a set stored class by class still shows every class.

A ``BatchPlan`` is what a dataset is handed: the batches one rank loads next, as slices of an
order. Since the rows of any step follow from (seed, epoch, step) alone, a resumed run seeks
to its step by starting the plan there; nothing is replayed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ddpimg.train.batch import BatchLayout
from ddpimg.train.seeding import derive_seed


def epoch_order(num_samples: int, seed: int, epoch: int) -> torch.Tensor:
    """The training order of an epoch: a permutation of range(num_samples) on the CPU."""
    generator = torch.Generator()
    generator.manual_seed(derive_seed(seed, "order", epoch))
    return torch.randperm(num_samples, generator=generator)


@dataclass(frozen=True)
class TrainShard:
    """Rank ``rank``'s part of every global batch of ``batch``."""

    num_samples: int
    batch: BatchLayout
    rank: int

    @property
    def offset(self) -> int:
        """This rank's first row in the global batch."""
        return self.rank * self.batch.per_rank

    def micro_offset(self, micro_step: int) -> int:
        """The first row of this rank's ``micro_step``-th forward pass (from 0) in the global
        batch."""
        return self.offset + micro_step * self.batch.micro

    @property
    def steps_per_epoch(self) -> int:
        return self.num_samples // self.batch.global_size

    def positions(self, step_in_epoch: int) -> slice:
        """Where this rank's rows of ``step_in_epoch`` (from 0) sit in the epoch's order."""
        start = step_in_epoch * self.batch.global_size + self.offset
        return slice(start, start + self.batch.per_rank)

    def micro_positions(self, step_in_epoch: int) -> tuple[slice, ...]:
        """Where the rows of each of this rank's forward passes of ``step_in_epoch`` sit in
        the epoch's order, in the order they are taken."""
        first = step_in_epoch * self.batch.global_size
        micro = self.batch.micro
        return tuple(
            slice(first + self.micro_offset(j), first + self.micro_offset(j) + micro)
            for j in range(self.batch.accumulation)
        )

    def rows(self, order: torch.Tensor, step_in_epoch: int) -> torch.Tensor:
        """The sample indices this rank trains on at ``step_in_epoch`` (from 0)."""
        return order[self.positions(step_in_epoch)]

    def plan(self, order: torch.Tensor, epoch: int, start: int, stop: int) -> BatchPlan:
        """This rank's batches of steps ``start`` to ``stop`` (exclusive) of ``epoch``: one
        batch a forward pass (``batch.accumulation`` of them a step), so that no more than a
        micro-batch is loaded at once."""
        slices = tuple(where for i in range(start, stop) for where in self.micro_positions(i))
        return BatchPlan(epoch, order, slices)


@dataclass(frozen=True)
class EvalShard:
    """This rank's contiguous part of the ``num_samples`` evaluated, cut into batches;
    ``set_size``: the set they are taken from, evenly spread, when it is larger."""

    num_samples: int
    batch_size: int
    rank: int
    world_size: int
    set_size: int | None = None

    @property
    def start(self) -> int:
        return self.rank * self.num_samples // self.world_size

    @property
    def stop(self) -> int:
        return (self.rank + 1) * self.num_samples // self.world_size

    @property
    def num_batches(self) -> int:
        """The same on every rank: enough batches for the largest shard."""
        largest = -(-self.num_samples // self.world_size)
        return -(-largest // self.batch_size)

    def batches(self) -> list[range]:
        """Sample index ranges, ``num_batches`` of them; the last ones may be empty."""
        return [
            range(
                min(self.start + i * self.batch_size, self.stop),
                min(self.start + (i + 1) * self.batch_size, self.stop),
            )
            for i in range(self.num_batches)
        ]

    def plan(self) -> BatchPlan:
        """This rank's evaluation batches, in sample order: sample i of those evaluated is
        ``i * set_size // num_samples`` of the set."""
        order = torch.arange(self.num_samples)
        if self.set_size is not None and self.set_size != self.num_samples:
            order = order * self.set_size // self.num_samples
        return BatchPlan(None, order, tuple(slice(r.start, r.stop) for r in self.batches()))


@dataclass(frozen=True)
class BatchPlan:
    """The batches one rank loads next: batch i holds the samples ``order[slices[i]]``.
    ``epoch`` (from 1) says which training epoch they belong to, for per-sample random
    draws (augmentation); None for evaluation, which draws nothing. ``order`` is an int64
    tensor on the CPU."""

    epoch: int | None
    order: torch.Tensor
    slices: tuple[slice, ...]

    def __len__(self) -> int:
        return len(self.slices)

    def rows(self, batch: int) -> torch.Tensor:
        """The sample indices of batch ``batch`` (from 0)."""
        return self.order[self.slices[batch]]
