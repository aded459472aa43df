"""Dropout whose masks do not depend on how the global batch is split over ranks.

``torch.nn.Dropout`` draws from the rank's own RNG stream, so 1 process and N processes drop
different units and their losses part ways. ``GlobalBatchDropout`` instead draws the mask of
the whole global batch from a generator seeded by (seed, step, layer) and applies the rows
of this rank's slice: the same sample at the same step gets the same mask on any topology.
Every rank draws the full global mask (cheap next to the forward pass for the bundled
trainers, and it is what makes the result independent of the split).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ddpimg.train.seeding import derive_seed


@dataclass(frozen=True)
class BatchPosition:
    """Where the current forward pass sits: optimizer step (from 1), this rank's first row
    in the global batch, and the global batch size."""

    step: int
    offset: int
    global_batch: int


class DropoutContext:
    """Shared by the loop (which sets ``position`` before each training forward) and the
    model's GlobalBatchDropout layers (which read it)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.position: BatchPosition | None = None


class GlobalBatchDropout(nn.Module):
    """Dropout with probability ``p``; ``layer`` tells the layers of one model apart."""

    def __init__(self, p: float, layer: int, context: DropoutContext) -> None:
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.layer = layer
        self.context = context

    def extra_repr(self) -> str:
        return f"p={self.p}, layer={self.layer}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        position = self.context.position
        if position is None:
            raise RuntimeError("GlobalBatchDropout ran in training mode before a batch position")
        rows = x.shape[0]
        if position.offset + rows > position.global_batch:
            raise RuntimeError(
                f"rows {position.offset}..{position.offset + rows} are outside the global "
                f"batch of {position.global_batch}"
            )
        generator = torch.Generator(device=x.device)
        generator.manual_seed(derive_seed(self.context.seed, "dropout", position.step, self.layer))
        # rand + compare rather than bernoulli_: its stream is the same for every dtype.
        draws = torch.rand(
            (position.global_batch, *x.shape[1:]), generator=generator, device=x.device
        )
        keep = draws[position.offset : position.offset + rows] >= self.p
        return x * keep.to(x.dtype) / (1 - self.p)
