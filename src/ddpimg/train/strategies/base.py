"""The strategy protocol: what the loop asks of DDP, DeepSpeed (and later FSDP).

Every strategy averages gradients over the ranks, so with a fixed global batch the update
is that of one process training on the whole global batch, whatever the strategy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch
    from torch import nn


class Strategy(Protocol):
    """Wraps a model and its optimizer; train/eval mode is set on the returned model."""

    name: str

    def wrap(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        """Take over ``model`` (already on the device) and ``optimizer``; returns the module
        to call for training and evaluation forwards."""
        ...

    def backward(self, loss: torch.Tensor) -> None:
        """Gradients of ``loss``, averaged over the ranks."""
        ...

    def step(self) -> None:
        """One optimizer step."""
        ...

    def zero_grad(self) -> None:
        """Clear the gradients before the next backward."""
        ...
