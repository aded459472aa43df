"""``--strategy ddp``: torch's DistributedDataParallel, gradients averaged in buckets during
backward."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext


class DdpStrategy:
    name = "ddp"

    def __init__(self, ctx: DistContext) -> None:
        self.ctx = ctx
        self._optimizer: torch.optim.Optimizer | None = None

    def wrap(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        self._optimizer = optimizer
        # device_ids names the one GPU this process drives; it must stay None on the CPU.
        device_ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
        # gradient_as_bucket_view: gradients live in the communication buckets, saving a copy.
        return DistributedDataParallel(model, device_ids=device_ids, gradient_as_bucket_view=True)

    def backward(self, loss: torch.Tensor) -> None:
        torch.autograd.backward(loss)

    def step(self) -> None:
        self.optimizer.step()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        if self._optimizer is None:
            raise RuntimeError("DdpStrategy used before wrap()")
        return self._optimizer
