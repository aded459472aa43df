"""The strategy protocol: what the loop asks of DDP, DeepSpeed and FSDP.

Every strategy averages gradients over the ranks, so with a fixed global batch the update
is that of one process training on the whole global batch, whatever the strategy, the
world size and the number of micro-batches each rank accumulates.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, TypeVar

from ddpimg.errors import DdpimgError

if TYPE_CHECKING:
    from pathlib import Path

    import torch
    from torch import nn


OptimizerFactory = Callable[["nn.Module"], "torch.optim.Optimizer"]
T = TypeVar("T")
# What a resume must repeat for a checkpoint to fit: the hint of every strategy's load error.
SAME_MODEL = "the trainer, model flags and strategy"


def wrapped(value: T | None, strategy: str) -> T:
    """A part that ``wrap`` builds (the model, the optimizer, DeepSpeed's engine); asking
    for it before is a bug in the caller, not a user's error."""
    if value is None:
        raise RuntimeError(f"{strategy} used before wrap()")
    return value


def does_not_fit(checkpoint: Path, reason: str, *, same: str = SAME_MODEL) -> DdpimgError:
    """The error of a checkpoint that cannot be loaded into the wrapped model: it names the
    checkpoint and why, and what the resume must repeat (``same``)."""
    return DdpimgError(
        f"checkpoint {checkpoint} does not fit this model and optimizer ({reason})",
        hint=f"resume with {same} that wrote it, or --resume none",
    )


def half_dtype(precision: str) -> torch.dtype | None:
    """The dtype that ``--precision`` computes in: bf16 or fp16; None for fp32."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def with_contiguous_parameters(model: nn.Module) -> nn.Module:
    """``model`` with every parameter in the default (contiguous) layout. DeepSpeed's and
    FSDP2's wrapping takes each parameter's memory as one dense run (DeepSpeed views it as
    bytes, FSDP2 refuses non-contiguous parameters), so a channels_last model (ResNet on a
    GPU) fails there. Inputs keep their layout: a convolution with a channels_last input still
    runs channels_last, whatever its weight's layout."""
    import torch

    return model.to(memory_format=torch.contiguous_format)


class Strategy(Protocol):
    """Wraps a model and its optimizer; train/eval mode is set on the returned model."""

    name: str

    def wrap(self, model: nn.Module, make_optimizer: OptimizerFactory) -> nn.Module:
        """Take over ``model`` (already on the device) and build its optimizer with
        ``make_optimizer``, called once with the module whose parameters are trained (after
        sharding, for a strategy that replaces parameters); returns the module to call for
        training and evaluation forwards."""
        ...

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer ``wrap`` built (its param groups carry the learning rate that the
        loop's schedule sets)."""
        ...

    def compile(self, backend: str) -> None:
        """Compile the module ``wrap`` returned in place with ``backend`` (``--compile``):
        its class and state-dict keys stay those of the eager module, so checkpoints load
        either way (``ddpimg.train.compiling``)."""
        ...

    def micro_batch(self, last: bool) -> AbstractContextManager[None]:
        """Around one micro-batch's forward and backward: before the step's ``last``
        micro-batch (or its only one) the backward adds the gradients to those of the
        earlier ones, with nothing crossing the ranks where the strategy allows it (DDP's
        ``no_sync``, FSDP2's ``set_requires_gradient_sync``, DeepSpeed ZeRO-0/1's accumulation
        boundary; ZeRO-2/3 reduce into their partitions every pass); after the last one the
        ranks hold the mean over the global batch."""
        ...

    def backward(self, loss: torch.Tensor) -> None:
        """Gradients of ``loss`` (a micro-batch's share of the step's loss), added to those
        of the step's earlier micro-batches and averaged over the ranks as ``micro_batch``
        says."""
        ...

    def step(self) -> None:
        """One optimizer step."""
        ...

    def zero_grad(self) -> None:
        """Clear the gradients before the next backward."""
        ...

    def save(self, directory: Path) -> None:
        """Write the model and optimizer state into ``directory``, in this strategy's native
        format (DDP: rank 0 ``torch.save``; DeepSpeed: ``engine.save_checkpoint``; FSDP:
        ``torch.distributed.checkpoint``).

        Called after ``wrap``, on every rank at the same step boundary (a collective call:
        the strategy may use collectives and barriers inside). ``directory`` is the same
        path on every rank, already exists, is empty, and lies on a filesystem every rank
        sees. Write only inside it; return once this rank's part is written and closed.
        Do not fsync, rename or checksum (the checkpoint module does, after every rank
        returned), and do not save the scheduler, RNG states or loop position (it saves
        them too).
        """
        ...

    def load(self, directory: Path, saved_world_size: int) -> None:
        """Restore the model and optimizer state that ``save`` wrote into ``directory`` on
        ``saved_world_size`` ranks: this run's number or another (each rank then takes its
        own part).

        Called after ``wrap`` and before the first step, on every rank (collective), with a
        directory whose checksums were verified. Afterwards the next ``step`` must do
        exactly what it would have done in the saved run: parameters, optimizer moments and
        step counts, and the param groups' learning rates (the scheduler is restored after
        this call). Raise a DdpimgError naming ``directory`` when its content does not fit
        the wrapped model.
        """
        ...
