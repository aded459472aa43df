"""``train mnist``, the default trainer: the origin tutorials' MNIST CNN (pytorch/examples
``mnist/main.py``) with Adadelta and a per-epoch decay (``task``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpimg.train.tasks.mnist.options import LEARNING_RATE, LR_DECAY
from ddpimg.train.tasks.spec import TrainerSpec

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Task


def _task(config: TrainConfig, ctx: DistContext, batch: BatchLayout) -> Task:
    from ddpimg.train.tasks.mnist.task import MnistTask

    return MnistTask(config, ctx)


SPEC = TrainerSpec(
    name="mnist",
    factory=_task,
    optimizer="Adadelta",
    learning_rate=LEARNING_RATE,
    lr_decay=LR_DECAY,
    data_source="a directory holding the raw MNIST idx files as torchvision lays them out "
    "(DIR/MNIST/raw/...)",
)
