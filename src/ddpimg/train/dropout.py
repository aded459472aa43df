"""Dropout and stochastic depth whose masks do not depend on how the global batch is split
over ranks.

``torch.nn.Dropout`` draws from the rank's own RNG stream, so 1 process and N processes drop
different units and their losses part ways. ``GlobalBatchDropout`` instead draws each
sample's mask from a generator seeded by (seed, step, layer, the sample's row in the global
batch): the same sample at the same step gets the same mask on any topology and in any
micro-batch. A forward pass draws only its own rows, so the cost follows the micro-batch,
not the global batch (a rank of 64 or a pass of 16 accumulated ones would otherwise draw the
whole batch's mask again and again). Masks drawn whole for the global batch, as ddpimg did
before 2026-11-29, were other numbers: a run resumed across that change continues with
other masks.
``GlobalStochasticDepth`` does the same for torchvision's ``StochasticDepth`` (a residual
branch dropped per sample, or for the whole batch), which ConvNeXt, EfficientNet, Swin and
others use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import torch
from torch import nn

from ddpimg.train.seeding import derive_seed

_Function = TypeVar("_Function", bound=Callable[..., Any])


@dataclass(frozen=True)
class BatchPosition:
    """Where the current forward pass sits: optimizer step (from 1), the pass's first row
    in the global batch (this rank's share, or the micro-batch's within it), and the global
    batch size."""

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
        keep = row_draws(self.context, self.layer, x, x.shape[1:]) >= self.p
        return x * keep.to(x.dtype) / (1 - self.p)


class GlobalStochasticDepth(nn.Module):
    """torchvision's ``StochasticDepth(p, mode)``: in ``row`` mode each sample's input is
    zeroed with probability ``p``, in ``batch`` mode the whole batch's; survivors are scaled
    by 1 / (1 - p)."""

    def __init__(self, p: float, mode: str, layer: int, context: DropoutContext) -> None:
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"drop probability must be in [0, 1], got {p}")
        if mode not in ("row", "batch"):
            raise ValueError(f"mode must be 'row' or 'batch', got {mode!r}")
        self.p = p
        self.mode = mode
        self.layer = layer
        self.context = context

    def extra_repr(self) -> str:
        return f"p={self.p}, mode={self.mode}, layer={self.layer}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        ones = (1,) * (x.dim() - 1)
        if self.mode == "row":
            draws = row_draws(self.context, self.layer, x, ones)
        else:
            draws = _generated(self.context, self.layer, x.device, (1, *ones))
        keep = (draws >= self.p).to(x.dtype)
        survival = 1.0 - self.p
        return x * (keep / survival if survival > 0 else keep)


def _eager(function: _Function) -> _Function:
    """``function`` run eagerly under ``--compile`` (``ddpimg.train.compiling``): traced,
    its draws would come from the compiler's own random stream (inductor replaces
    torch.rand), not from the per-row generators, and the masks would depend on whether the
    model was compiled. Dynamo breaks the graph around it. torch 2.14's dynamo cannot trace
    ``Generator.manual_seed`` and breaks there anyway (with a warning per call site); this
    says so on purpose, whatever a later dynamo learns to trace."""
    # torch.compiler.disable carries no annotations (torch 2.14).
    disabled = torch.compiler.disable(function)  # type: ignore[no-untyped-call]
    return cast("_Function", disabled)


@_eager
def row_draws(
    context: DropoutContext, layer: int, x: torch.Tensor, tail: tuple[int, ...] | torch.Size
) -> torch.Tensor:
    """Uniform draws of shape (rows of ``x``, *tail) for ``layer`` at the current step: row i
    is the draw of global row offset + i, from a generator of its own, the same wherever
    that row is computed."""
    position = context.position
    if position is None:
        raise RuntimeError("a global-batch random layer ran in training mode before a position")
    rows = x.shape[0]
    if position.offset + rows > position.global_batch:
        raise RuntimeError(
            f"rows {position.offset}..{position.offset + rows} are outside the global "
            f"batch of {position.global_batch}"
        )
    generator = torch.Generator(device=x.device)
    draws = torch.empty((rows, *tail), device=x.device)
    for index in range(rows):
        row = position.offset + index
        generator.manual_seed(derive_seed(context.seed, "dropout", position.step, layer, row))
        torch.rand(tuple(tail), generator=generator, device=x.device, out=draws[index])
    return draws


@_eager
def _generated(
    context: DropoutContext, layer: int, device: torch.device, shape: tuple[int, ...]
) -> torch.Tensor:
    position = context.position
    if position is None:
        raise RuntimeError("a global-batch random layer ran in training mode before a position")
    generator = torch.Generator(device=device)
    generator.manual_seed(derive_seed(context.seed, "dropout", position.step, layer))
    # rand + compare rather than bernoulli_: its stream is the same for every dtype.
    return torch.rand(shape, generator=generator, device=device)
