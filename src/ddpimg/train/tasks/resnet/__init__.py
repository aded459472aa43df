"""``train resnet``: a torchvision classification model, ResNet-50 by default, with SGD on
ImageNet-shaped images, the CSC tutorials' GPU benchmark (``task``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpimg.train.config import check_at_least
from ddpimg.train.tasks.spec import TrainerFlag, TrainerSpec

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Task

DEFAULT_ARCH = "resnet50"
DEFAULT_IMAGE_SIZE = 224
MIN_IMAGE_SIZE = 32
# Goyal et al. (2017): 0.1 per 256 images of global batch, torchvision's ImageNet recipe.
LR_PER_256 = 0.1


def _task(config: TrainConfig, ctx: DistContext) -> Task:
    from ddpimg.train.tasks.resnet.task import ResnetTask

    return ResnetTask(config, ctx)


def _check(config: TrainConfig) -> None:
    check_at_least("--image-size", config.image_size, MIN_IMAGE_SIZE, "ImageNet models take 224")


SPEC = TrainerSpec(
    name="resnet",
    factory=_task,
    optimizer="SGD",
    learning_rate=LR_PER_256,
    # Per-rank batch that fits a 40 GB GPU with ResNet-50 at 224 px.
    default_batch_size=32,
    bf16_on_gpu=True,
    data_source="an ImageFolder directory with train/ and val/",
    flags=(
        TrainerFlag(
            "--arch",
            "any torchvision classification model, e.g. resnet18, vit_b_16",
            default=DEFAULT_ARCH,
            metavar="NAME",
        ),
        TrainerFlag(
            "--image-size",
            "side of the square images: synthetic ones are generated at it, ImageFolder ones "
            "resized and centre-cropped to it",
            default=str(DEFAULT_IMAGE_SIZE),
            metavar="PX",
            type=int,
        ),
        TrainerFlag(
            "--sync-batchnorm",
            "BatchNorm statistics over the global batch with more than one rank (GPU only; "
            "needed for topology invariance, costs a host sync per layer)",
            default="on",
            negatable=True,
        ),
    ),
    check=_check,
)
