"""``train resnet``'s own options and the defaults its spec (the package), its task and its
data share; imports no torch, and neither the package nor the task."""

from __future__ import annotations

from dataclasses import dataclass

from ddpimg.train.options import TrainerOptions, option

DEFAULT_ARCH = "resnet50"
DEFAULT_IMAGE_SIZE = 224
MIN_IMAGE_SIZE = 32
# Goyal et al. (2017): 0.1 per 256 images of global batch, torchvision's ImageNet recipe.
LR_PER_256 = 0.1


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
