"""The one check of a trainer against a strategy on a device."""

from __future__ import annotations

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.train.config import TrainConfig
from ddpimg.train.pairing import check_pairing
from ddpimg.train.strategies import STRATEGIES
from ddpimg.train.tasks import TRAINERS
from ddpimg.train.tasks.toy import ToyOptions


@pytest.mark.parametrize("strategy", ["deepspeed", "fsdp"])
def test_a_model_spread_over_two_gpus_needs_ddp(strategy: str) -> None:
    config = TrainConfig(trainer="toy", strategy=strategy)
    with pytest.raises(
        DdpimgError,
        match=rf"^--strategy {strategy} cannot run the toy model spread over 2 GPUs per "
        r"process \(it keeps a whole model on one device\)\n  hint: use --strategy ddp, or "
        r"one GPU per process \(toy: --gpus-per-replica 1\)$",
    ):
        check_pairing(TRAINERS["toy"], STRATEGIES[strategy], config, "cuda")


@pytest.mark.parametrize(
    ("trainer", "strategy", "device", "overrides"),
    [
        ("toy", "ddp", "cuda", {}),  # DDP takes a model on two GPUs
        ("toy", "fsdp", "cpu", {}),  # on the CPU nothing is spread
        ("toy", "deepspeed", "cuda", {"options": ToyOptions(gpus_per_replica=1)}),
        ("resnet", "fsdp", "cuda", {}),
        ("gpt", "deepspeed", "cuda", {}),
    ],
)
def test_pairs_that_train_together_pass(
    trainer: str, strategy: str, device: str, overrides: dict[str, ToyOptions]
) -> None:
    config = TrainConfig(trainer=trainer, strategy=strategy, **overrides)  # type: ignore[arg-type]
    check_pairing(TRAINERS[trainer], STRATEGIES[strategy], config, device)
