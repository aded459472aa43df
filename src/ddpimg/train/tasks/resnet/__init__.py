"""``train resnet``: a torchvision classification model, ResNet-50 by default (``model``),
with SGD (``task``) on synthetic ImageNet-shaped images (``synthetic``) or an ImageFolder
tree or tar shards streamed from storage (``data``, ``stream``, ``transforms``): the CSC
tutorials' GPU benchmark."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpimg.train.options import TrainerOptions, option
from ddpimg.train.tasks.spec import TrainerSpec

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Task

DEFAULT_ARCH = "resnet50"
DEFAULT_IMAGE_SIZE = 224
MIN_IMAGE_SIZE = 32
# Goyal et al. (2017): 0.1 per 256 images of global batch, torchvision's ImageNet recipe.
LR_PER_256 = 0.1


def _task(config: TrainConfig, ctx: DistContext, batch: BatchLayout) -> Task:
    from ddpimg.train.tasks.resnet.task import ResnetTask

    return ResnetTask(config, ctx, batch)


BAD_SAMPLES = ("error", "skip")


@dataclass(frozen=True)
class ResnetOptions(TrainerOptions):
    """``train resnet``'s own flags."""

    arch: str | None = option(
        "any torchvision classification model, e.g. resnet18, vit_b_16",
        default=DEFAULT_ARCH,
        metavar="NAME",
    )
    image_size: int | None = option(
        "side of the square images: synthetic ones are generated at it, files are randomly "
        "cropped to it for training and resized and centre-cropped for evaluation",
        default=str(DEFAULT_IMAGE_SIZE),
        metavar="PX",
        minimum=MIN_IMAGE_SIZE,
        hint="ImageNet models take 224",
    )
    sync_batchnorm: bool | None = option(
        "BatchNorm statistics over the global batch (torch's SyncBatchNorm with several GPU "
        "ranks, GlobalBatchNorm on the CPU): needed for topology invariance; costs a "
        "collective per layer",
        default="on",
    )
    workers: int | None = option(
        "data-loading worker processes per rank for --data DIR (0: load in the training process)",
        default="the rank's CPUs - 1, at most 32",
        metavar="N",
        minimum=0,
        hint="0 loads the data in the training process",
        free_to_change=True,
    )
    bad_samples: str | None = option(
        "an unreadable image file: stop with an error naming it, or replace it by the next "
        "readable sample and count it in the summary",
        default="error",
        choices=BAD_SAMPLES,
        free_to_change=True,
    )


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
