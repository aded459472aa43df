"""How gradients are shared between ranks (``--strategy``): small adapters around one loop.

Each factory imports its module (and torch, DeepSpeed) only when called.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.options import TrainConfig
    from ddpimg.train.strategies.base import Strategy


def _ddp(config: TrainConfig, ctx: DistContext) -> Strategy:
    from ddpimg.train.strategies.ddp import DdpStrategy

    return DdpStrategy(ctx, config.precision)


def _deepspeed(config: TrainConfig, ctx: DistContext) -> Strategy:
    from ddpimg.train.strategies.deepspeed import DeepSpeedStrategy

    return DeepSpeedStrategy(config, ctx)


def _fsdp(config: TrainConfig, ctx: DistContext) -> Strategy:
    from ddpimg.train.strategies.fsdp import FsdpStrategy

    return FsdpStrategy(config, ctx)


STRATEGIES: dict[str, Callable[[TrainConfig, DistContext], Strategy]] = {
    "ddp": _ddp,
    "deepspeed": _deepspeed,
    "fsdp": _fsdp,
}
