"""``train resnet``: a torchvision classification model, ResNet-50 by default (``model``),
with SGD (``task``) on synthetic ImageNet-shaped images (``synthetic``) or an ImageFolder
tree or tar shards streamed from storage (``data``, ``stream``, ``transforms``): the CSC
tutorials' GPU benchmark."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpimg.train.tasks.resnet.options import LR_PER_256, ResnetOptions
from ddpimg.train.tasks.spec import TrainerSpec

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Task

# The options live in ``options``, which the task imports too (the task never imports this
# package, whose factory imports the task); they are exported here as well.
__all__ = ["SPEC", "ResnetOptions"]


def _task(config: TrainConfig, ctx: DistContext, batch: BatchLayout) -> Task:
    from ddpimg.train.tasks.resnet.task import ResnetTask

    return ResnetTask(config, ctx, batch)


SPEC = TrainerSpec(
    name="resnet",
    factory=_task,
    optimizer="SGD",
    learning_rate=LR_PER_256,
    # Per-rank batch that fits a 40 GB GPU with ResNet-50 at 224 px.
    default_batch_size=32,
    bf16_on_gpu=True,
    data_source="an ImageFolder tree (DIR/train/CLASS/*, DIR/val/CLASS/*) or tar shards "
    "(DIR/train-*.tar, DIR/val-*.tar), read as the steps need them",
    options=ResnetOptions,
)
