"""``--strategy fsdp``: FSDP2, ``torch.distributed.fsdp.fully_shard``.

Each rank keeps 1/world of every parameter, gradient and optimizer state; a unit's full
parameters are all-gathered for its forward and backward and freed after, and gradients
are reduce-scattered with the mean over ranks, as DDP averages them, so the update is that
of one process on the whole global batch.

Units (``shard_units``): the elements of the model's outermost ``nn.ModuleList`` /
``nn.Sequential`` containers that hold parameters - a GPT's transformer blocks, a ResNet's
bottleneck blocks, a ViT's encoder layers - each get ``fully_shard``, then the root takes
what is left (embeddings, stem, head; tied weights stay together there). With
``--precision bf16`` the units compute in bf16 and reduce gradients in fp32.

FSDP2 replaces every parameter by a sharded DTensor parameter of the same name, so the
optimizer is built after sharding, on those parameters.

Checkpoints use torch.distributed.checkpoint (DCP): every rank writes its shards, and a
checkpoint loads into any world size (DCP reshards on load), read without unpickling code
(``ddpimg.train.checkpoint.dcp``).

FSDP2 runs on the CPU with Gloo (torch 2.14: all-gather and reduce-scatter of CPU tensors);
the integration tests run it there.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ddpimg.train.strategies.base import (
    does_not_fit,
    half_dtype,
    with_contiguous_parameters,
    wrapped,
)
from ddpimg.train.strategies.scaling import LossScaler

if TYPE_CHECKING:
    from pathlib import Path

    from ddpimg.runtime.context import DistContext
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.strategies.base import OptimizerFactory

MODEL_KEY = "model"
OPTIMIZER_KEY = "optimizer"
SCALER_KEY = "loss_scaler"  # --precision fp16 only


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The submodules that get their own ``fully_shard``, in module order (see the module
    docstring); empty for a model without containers (it is sharded as one unit)."""
    units: list[nn.Module] = []
    for child in model.children():
        if isinstance(child, (nn.ModuleList, nn.Sequential)):
            units.extend(
                element
                for element in child.children()
                if next(element.parameters(), None) is not None
            )
        else:
            units.extend(shard_units(child))
    return units


def batch_norms(model: nn.Module) -> list[nn.Module]:
    """The BatchNorm layers of ``model`` (torch's, SyncBatchNorm and ``GlobalBatchNorm``)."""
    return [
        module for module in model.modules() if isinstance(module, nn.modules.batchnorm._BatchNorm)
    ]


class FsdpStrategy:
    name = "fsdp"

    def __init__(self, config: TrainConfig, ctx: DistContext) -> None:
        self.ctx = ctx
        self.precision = config.precision
        self.scaler = LossScaler.for_precision(config.precision, ctx.device, sharded=True)
        self._model: nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None

    def wrap(self, model: nn.Module, make_optimizer: OptimizerFactory) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(self.ctx.device.type, (self.ctx.world_size,))
        half = half_dtype(self.precision)
        policy = (
            MixedPrecisionPolicy(param_dtype=half, reduce_dtype=torch.float32)
            if half is not None
            else MixedPrecisionPolicy()
        )
        model = with_contiguous_parameters(model)
        if half is not None:
            # BatchNorm keeps float32 running statistics, which a bf16/fp16 weight cannot
            # be used with (``expected scalar type BFloat16 but found Float``): each
            # BatchNorm is a unit of its own computing in float32, as FSDP1's
            # MixedPrecision left BatchNorm alone (its ``_module_classes_to_ignore``).
            full = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
            for norm in batch_norms(model):
                fully_shard(norm, mesh=mesh, mp_policy=full)
        for unit in shard_units(model):
            fully_shard(unit, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        self._model, self._optimizer = model, make_optimizer(model)
        return model

    def compile(self, backend: str) -> None:
        # After fully_shard, as FSDP2 asks: its all-gathers and reduce-scatters run in its
        # hooks around each unit, outside the graphs dynamo captures between them.
        self.model.compile(backend=backend)

    def micro_batch(self, last: bool) -> AbstractContextManager[None]:
        from torch.distributed.fsdp import FSDPModule

        model = self.model
        if isinstance(model, FSDPModule):
            # Before the last micro-batch the unsharded gradients accumulate on each rank
            # (in float32 where the units compute in bf16: FSDP2 keeps them in the reduce
            # dtype); its backward reduce-scatters their sum.
            model.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.backward(loss)

    def step(self) -> None:
        self.scaler.step(self.optimizer)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def save(self, directory: Path) -> None:
        from torch.distributed.checkpoint.state_dict import get_state_dict
        from torch.distributed.checkpoint.state_dict_saver import save

        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        state: dict[str, Any] = {MODEL_KEY: model_state, OPTIMIZER_KEY: optimizer_state}
        if self.scaler.enabled:
            state[SCALER_KEY] = self.scaler.state_dict()
        save(state, checkpoint_id=str(directory))

    def load(self, directory: Path, saved_world_size: int) -> None:
        # DCP reshards on load: the same call on any world size.
        from torch.distributed.checkpoint.api import CheckpointException
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        from ddpimg.train.checkpoint import dcp

        # The current state gives DCP the keys, shapes and shardings to read into; it loads
        # in place, into these same dictionaries.
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        state: dict[str, Any] = {MODEL_KEY: model_state, OPTIMIZER_KEY: optimizer_state}
        if self.scaler.enabled:
            state[SCALER_KEY] = self.scaler.state_dict()
        try:
            dcp.load(state, directory)
        except (CheckpointException, RuntimeError, KeyError, ValueError) as err:
            raise does_not_fit(directory, f"torch.distributed.checkpoint: {err}") from err
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=model_state,
            optim_state_dict=optimizer_state,
        )
        if self.scaler.enabled:
            self.scaler.load_state_dict(state[SCALER_KEY])

    @property
    def model(self) -> nn.Module:
        return wrapped(self._model, "FsdpStrategy")

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return wrapped(self._optimizer, "FsdpStrategy")
