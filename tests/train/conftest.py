"""Fixtures for the trainer tests: a 1-rank gloo process group in this process (the runtime
always initialises one, even for a single process) and the matching DistContext."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from ddpimg.runtime.context import DistContext
from ddpimg.train.config import TrainConfig
from tests.train.configs import trainer_config
from tests.train.contexts import single_process


@pytest.fixture(scope="package")
def process_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    rendezvous = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def ctx(process_group: None) -> Iterator[DistContext]:
    yield single_process()
    # Training switches deterministic mode on or off; leave the process as it was.
    torch.use_deterministic_algorithms(False)


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., TrainConfig]:
    """TrainConfig of a run small enough for a unit test (a few seconds on two cores)."""

    def make(**overrides: Any) -> TrainConfig:
        small = {
            "batch_size": 8,
            "train_samples": 64,
            "eval_samples": 40,
            "max_steps": 5,
            "log_every": 1,
            "out": tmp_path,
        }
        return trainer_config(**small | overrides)

    return make
