"""``train toy``: PyTorch's "Combining DDP with model parallelism" tutorial, a model whose
head and tail may sit on two GPUs of one process (``task``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError
from ddpimg.train.config import SYNTHETIC
from ddpimg.train.tasks.spec import TrainerSpec
from ddpimg.train.tasks.toy.options import LEARNING_RATE, ToyOptions, gpus_per_replica

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Task

# The options live in ``options``, which the task imports too (the task never imports this
# package, whose factory imports the task); they are exported here as well.
__all__ = ["SPEC", "ToyOptions", "gpus_per_replica"]


def _task(config: TrainConfig, ctx: DistContext, batch: BatchLayout) -> Task:
    from ddpimg.train.tasks.toy.task import ToyTask

    return ToyTask(config, ctx)


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
    learning_rate=LEARNING_RATE,
    options=ToyOptions,
    devices_per_rank=gpus_per_replica,
    check=_check,
)
