"""``train toy``: PyTorch's "Combining DDP with model parallelism" tutorial, a model whose
head and tail may sit on two GPUs of one process (``task``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError
from ddpimg.train.config import SYNTHETIC
from ddpimg.train.options import TrainerOptions, option
from ddpimg.train.tasks.spec import TrainerSpec

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Task

DEFAULT_GPUS_PER_REPLICA = 2
GPUS_PER_REPLICA = (1, 2)


def _task(config: TrainConfig, ctx: DistContext, batch: BatchLayout) -> Task:
    from ddpimg.train.tasks.toy.task import ToyTask

    return ToyTask(config, ctx)


@dataclass(frozen=True)
class ToyOptions(TrainerOptions):
    """``train toy``'s own flag."""

    gpus_per_replica: int | None = option(
        "GPUs each process drives: 2 puts the head and the tail on two GPUs; GPUs per node "
        "must be processes per node times this",
        default=str(DEFAULT_GPUS_PER_REPLICA),
        metavar="|".join(map(str, GPUS_PER_REPLICA)),
    )

    def check(self) -> None:
        if self.gpus_per_replica is not None and self.gpus_per_replica not in GPUS_PER_REPLICA:
            raise DdpimgError(
                f"--gpus-per-replica must be 1 or 2, got {self.gpus_per_replica}",
                hint="the toy model has two parts, head and tail: 2 puts them on two GPUs, 1 "
                "on one",
            )


def gpus_per_replica(config: TrainConfig) -> int:
    """GPUs each process drives (``--gpus-per-replica``)."""
    return ToyOptions.of(config).gpus_per_replica or DEFAULT_GPUS_PER_REPLICA


def _check(config: TrainConfig) -> None:
    if config.data != SYNTHETIC:
        raise DdpimgError(
            f"the toy trainer has only a synthetic dataset, got --data {config.data}",
            hint="drop --data (the toy rows are [x]*32 with label x % 10)",
        )


SPEC = TrainerSpec(
    name="toy",
    factory=_task,
    optimizer="Adam",
    learning_rate=1e-4,
    options=ToyOptions,
    devices_per_rank=gpus_per_replica,
    check=_check,
)
