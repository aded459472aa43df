"""How gradients are shared between ranks (``--strategy``): small adapters around one loop,
each built by its spec's factory from the config, the world and the run's batch layout.

Importing this registry imports no strategy's code (nor torch, DeepSpeed): each factory
imports its module when called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpimg.train.options import check_choice

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.strategies.base import Strategy


@dataclass(frozen=True)
class StrategySpec:
    """One ``--strategy``."""

    name: str
    factory: Callable[[TrainConfig, DistContext, BatchLayout], Strategy]
    #: Whether it trains a model whose parameters sit on several devices of one rank (the
    #: toy trainer's head and tail); the others keep or shard a whole model on one device.
    takes_spread_model: bool = False


def _ddp(config: TrainConfig, ctx: DistContext, batch: BatchLayout) -> Strategy:
    from ddpimg.train.strategies.ddp import DdpStrategy

    return DdpStrategy(config, ctx)


def _deepspeed(config: TrainConfig, ctx: DistContext, batch: BatchLayout) -> Strategy:
    from ddpimg.train.strategies.deepspeed import DeepSpeedStrategy

    return DeepSpeedStrategy(config, ctx, batch)


def _fsdp(config: TrainConfig, ctx: DistContext, batch: BatchLayout) -> Strategy:
    from ddpimg.train.strategies.fsdp import FsdpStrategy

    return FsdpStrategy(config, ctx)


STRATEGIES: dict[str, StrategySpec] = {
    spec.name: spec
    for spec in (
        StrategySpec("ddp", _ddp, takes_spread_model=True),
        StrategySpec("deepspeed", _deepspeed),
        StrategySpec("fsdp", _fsdp),
    )
}


def strategy_for(config: TrainConfig) -> StrategySpec:
    """The spec of ``config.strategy``; DdpimgError listing the strategies when unknown."""
    check_choice("--strategy", config.strategy, tuple(sorted(STRATEGIES)))
    return STRATEGIES[config.strategy]
