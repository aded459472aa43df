"""Whether a trainer and a strategy can train together on this device: the one place that
decides it, before anything is built. Imports no torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError

if TYPE_CHECKING:
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.strategies import StrategySpec
    from ddpimg.train.tasks.spec import TrainerSpec


def check_pairing(
    trainer: TrainerSpec, strategy: StrategySpec, config: TrainConfig, device_type: str
) -> None:
    """DdpimgError when ``strategy`` cannot train ``trainer``'s model as ``config`` builds it
    on a ``device_type`` device ('cuda', 'cpu')."""
    from ddpimg.train.strategies import STRATEGIES

    devices = trainer.devices_per_rank(config)
    # Only GPUs spread a model: on the CPU every part of it sits on the one CPU device.
    if device_type == "cuda" and devices > 1 and not strategy.takes_spread_model:
        able = " or ".join(name for name, spec in STRATEGIES.items() if spec.takes_spread_model)
        raise DdpimgError(
            f"--strategy {strategy.name} cannot run the {trainer.name} model spread over "
            f"{devices} GPUs per process (it keeps a whole model on one device)",
            hint=f"use --strategy {able}, or one GPU per process (toy: --gpus-per-replica 1)",
        )
