"""``--strategy ddp``: torch's DistributedDataParallel, gradients averaged in buckets during
backward; a single rank trains the bare module.

Checkpoints: every rank holds the same model and optimizer state, so rank 0 alone writes
``model.pt`` (``torch.save`` of both state dicts) and every rank reads it back; a resume
may therefore use another world size, the global batch being the same."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ddpimg.train.checkpoint.safeload import load_tensors
from ddpimg.train.checkpoint.structure import unusable
from ddpimg.train.strategies.base import does_not_fit, wrapped
from ddpimg.train.strategies.scaling import LossScaler

if TYPE_CHECKING:
    from pathlib import Path

    from ddpimg.runtime.context import DistContext
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.strategies.base import OptimizerFactory


STATE_FILE = "model.pt"
STATE_KEYS = frozenset({"model", "optimizer", "scaler"})  # what save writes


class DdpStrategy:
    name = "ddp"

    def __init__(self, config: TrainConfig, ctx: DistContext) -> None:
        self.ctx = ctx
        self.scaler = LossScaler.for_precision(config.precision, ctx.device, sharded=False)
        self._model: nn.Module | None = None
        self._wrapped: nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None

    def wrap(self, model: nn.Module, make_optimizer: OptimizerFactory) -> nn.Module:
        # DDP keeps the module's own parameters: the optimizer may hold them from the start.
        self._model, self._optimizer = model, make_optimizer(model)
        if self.ctx.world_size == 1:
            # With one rank DDP has nothing to average, but still copies every gradient
            # into its buckets, all-reduces them and divides: a cost with no effect
            # (`nox -s bench` measures it). The bare module trains identically.
            self._wrapped = model
            return model
        # device_ids names the one GPU this process drives; it must stay None on the CPU and
        # for a module spread over several GPUs (the toy trainer's head and tail).
        single_gpu = self.ctx.device.type == "cuda" and all(
            parameter.device == self.ctx.device for parameter in model.parameters()
        )
        device_ids = [self.ctx.device.index] if single_gpu else None
        # gradient_as_bucket_view: gradients live in the communication buckets, saving a copy
        # of every gradient and its memory; the update is the same either way.
        self._wrapped = DistributedDataParallel(
            model, device_ids=device_ids, gradient_as_bucket_view=True
        )
        return self._wrapped

    def compile(self, backend: str) -> None:
        # DDP itself compiled: dynamo then splits the graph at DDP's bucket boundaries
        # (its DDPOptimizer), so the all-reduce of a bucket still overlaps the backward.
        wrapped(self._wrapped, "DdpStrategy").compile(backend=backend)

    def micro_batch(self, last: bool) -> AbstractContextManager[None]:
        wrapped_model = self._wrapped
        if last or not isinstance(wrapped_model, DistributedDataParallel):
            return contextlib.nullcontext()
        # The forward too: DDP prepares its all-reduce there. The last micro-batch's
        # backward all-reduces the accumulated buckets.
        return wrapped_model.no_sync()

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.backward(loss)

    def step(self) -> None:
        self.scaler.step(self.optimizer)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def save(self, directory: Path) -> None:
        if self.ctx.is_main:
            state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
            if self.scaler.enabled:
                state["scaler"] = self.scaler.state_dict()
            torch.save(state, directory / STATE_FILE)

    def load(self, directory: Path, saved_world_size: int) -> None:
        # Every rank's state is the whole state: the same on any world size.
        path = directory / STATE_FILE
        # The unwrapped module's parameters sit on the devices the task put them on (two
        # for the toy trainer): loading copies into them, wherever they are.
        state = load_tensors(path)
        # Keys and kinds first: load_state_dict trusts what it is given (a list for the
        # optimizer state was a TypeError traceback).
        problem = _state_mismatch(state)
        if problem:
            raise unusable(path, problem)
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.scaler.load_state_dict(state.get("scaler", {}))
        except (KeyError, RuntimeError, ValueError, TypeError, IndexError) as err:
            raise does_not_fit(path, str(err)) from err

    @property
    def model(self) -> nn.Module:
        """The unwrapped module: its state dict has no DDP ``module.`` prefixes."""
        return wrapped(self._model, "DdpStrategy")

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return wrapped(self._optimizer, "DdpStrategy")


def _state_mismatch(state: object) -> str | None:
    """Where a loaded ``model.pt`` differs from what ``DdpStrategy.save`` writes (model and
    optimizer state dicts, a scaler's with fp16), or None."""
    if not isinstance(state, dict) or not {"model", "optimizer"} <= set(state) <= STATE_KEYS:
        found = sorted(map(str, state))[:5] if isinstance(state, dict) else type(state).__name__
        return f"{found}, expected a dict of model, optimizer (and scaler)"
    model, optimizer = state["model"], state["optimizer"]
    if not isinstance(model, dict) or not all(
        isinstance(key, str) and isinstance(value, torch.Tensor) for key, value in model.items()
    ):
        return "model: not a dict of tensors"
    if not (
        isinstance(optimizer, dict)
        and isinstance(optimizer.get("state"), dict)
        and isinstance(optimizer.get("param_groups"), list)
        and all(isinstance(group, dict) for group in optimizer["param_groups"])
    ):
        return "optimizer: not an optimizer's state_dict"
    if not isinstance(state.get("scaler", {}), dict):
        return "scaler: not a dict"
    return None
