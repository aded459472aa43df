"""``train resnet``: a torchvision classification model (ResNet-50 by default, ``--arch``
any of ``torchvision.models.list_models(module=torchvision.models)``), untrained, on
synthetic ImageNet-shaped images or a dataset directory streamed from storage (``data``),
with SGD (momentum 0.9, weight decay 1e-4) and cross-entropy: the CSC tutorials' benchmark.
The default learning rate follows the linear scaling rule of Goyal et al. (2017), 0.1 per
256 images of global batch, the rate torchvision's ImageNet recipe uses at 256.

On a GPU the model and the images are channels_last (the layout cuDNN's convolutions are
fastest in with bf16) and cuDNN autotunes its kernels unless ``--deterministic``;
``--precision auto`` then means bf16 autocast. The summary reports ``images_per_s`` after
the first ``--warmup-steps`` steps.

The model's random layers and BatchNorm are made independent of the number of processes
(``model``). torch's SyncBatchNorm costs a host synchronisation per layer and step (it drops
empty ranks' statistics with a data-dependent mask), so a throughput comparison against
per-GPU BatchNorm should switch it off (``--no-sync-batchnorm``).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from ddpimg.train.tasks.resnet.data import ImageData, load_images
from ddpimg.train.tasks.resnet.model import build_classifier, check_arch, has_batchnorm
from ddpimg.train.tasks.resnet.options import (
    DEFAULT_ARCH,
    DEFAULT_IMAGE_SIZE,
    LR_PER_256,
    ResnetOptions,
)

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.dropout import DropoutContext
    from ddpimg.train.tasks.base import Dataset

MOMENTUM = 0.9
WEIGHT_DECAY = 1e-4


class ResnetTask:
    """``train resnet``; ``batch``'s global size scales the default learning rate."""

    eval_batch_size = 256

    def __init__(self, config: TrainConfig, ctx: DistContext, batch: BatchLayout) -> None:
        self.config = config
        self.ctx = ctx
        self.batch = batch
        self.options = ResnetOptions.of(config)
        self.arch = self.options.arch or DEFAULT_ARCH
        check_arch(self.arch)
        self.image_size = self.options.image_size or DEFAULT_IMAGE_SIZE

    @cached_property
    def images(self) -> ImageData:
        return load_images(self.config, self.ctx, self.image_size)

    def datasets(self) -> tuple[Dataset, Dataset]:
        return self.images.train, self.images.eval

    def data_facts(self) -> dict[str, Any]:
        return self.images.facts

    def build_model(self, dropout: DropoutContext) -> nn.Module:
        device = self.ctx.device
        model = build_classifier(
            self.arch,
            image_size=self.image_size,
            num_classes=self.images.num_classes,
            dropout=dropout,
            batchnorm=self.batchnorm(),
            device=device,
        )
        if device.type == "cuda" and not self.config.deterministic:
            torch.backends.cudnn.benchmark = True
        return model

    def batchnorm(self) -> str:
        """How BatchNorm takes its statistics (``model.build_classifier``): over the global
        batch unless ``--no-sync-batchnorm``, with torch's SyncBatchNorm where it runs
        (several GPU ranks) and GlobalBatchNorm on the CPU."""
        if self.options.sync_batchnorm is False:
            return "local"
        if self.ctx.device.type != "cuda":
            return "global"
        return "sync" if self.ctx.world_size > 1 else "local"

    def fingerprint(self) -> dict[str, int]:
        samples = self.batchnorm_samples()
        return {} if samples is None else {"batchnorm_samples": samples}

    def batchnorm_samples(self) -> int | None:
        """Synchronised BatchNorm normalises over every rank's micro-batch of a forward
        pass, per-rank BatchNorm (``--no-sync-batchnorm``) over this rank's: with gradient
        accumulation that is less than the global batch, and it changes with the world
        size (synchronised) or the micro-batch (either)."""
        if not has_batchnorm(self.arch, self.image_size):
            return None
        return self.batch.micro if self.batchnorm() == "local" else self.batch.per_forward

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.float(), target, reduction="none")

    def correct(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (output.argmax(dim=1) == target).sum()

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(
            model.parameters(),
            lr=self.config.learning_rate(LR_PER_256 * self.batch.global_size / 256),
            momentum=MOMENTUM,
            weight_decay=WEIGHT_DECAY,
        )

    def throughput(self, samples_per_s: float, world_size: int) -> dict[str, float | None]:
        return {"images_per_s": samples_per_s}
