"""``train resnet``: a torchvision classification model (ResNet-50 by default, ``--arch``
any of ``torchvision.models.list_models(module=torchvision.models)``), untrained, on
synthetic ImageNet-shaped images or an ImageFolder tree (``ddpimg.train.images``), with
SGD (momentum 0.9, weight decay 1e-4) and cross-entropy: the CSC tutorials' benchmark. The
default learning rate follows the linear scaling rule of Goyal et al. (2017), 0.1 per 256
images of global batch, the rate torchvision's ImageNet recipe uses at 256.

On a GPU the model and the images are channels_last (the layout cuDNN's convolutions are
fastest in with bf16) and cuDNN autotunes its kernels unless ``--deterministic``;
``--precision auto`` then means bf16 autocast. The summary reports ``images_per_s`` after
the first ``--warmup-steps`` steps.

BatchNorm normalises with the statistics of the batch it sees. Over several ranks that is
each rank's slice, so the loss would depend on the number of processes; SyncBatchNorm
takes the statistics of the whole global batch, which keeps the trajectory the same for
any topology. It is therefore switched on with more than one rank (``--no-sync-batchnorm``
turns it off). torch's SyncBatchNorm runs on GPUs only (it refuses CPU tensors), so on the
CPU BatchNorm stays per rank; and it costs a host synchronisation per layer and step (its
implementation drops empty ranks' statistics with a data-dependent mask), which a
throughput comparison against per-GPU BatchNorm should switch off.
"""

from __future__ import annotations

import difflib
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from ddpimg.errors import DdpimgError
from ddpimg.train.config import SYNTHETIC
from ddpimg.train.images import (
    IMAGENET_CLASSES,
    image_folder_classes,
    load_image_folder,
    synthetic_imagenet,
)
from ddpimg.train.tasks.resnet import DEFAULT_ARCH, DEFAULT_IMAGE_SIZE, SPEC

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.dropout import DropoutContext
    from ddpimg.train.tasks.base import Dataset

MOMENTUM = 0.9
WEIGHT_DECAY = 1e-4


def classification_models() -> list[str]:
    """The names ``--arch`` accepts."""
    import torchvision

    return list(torchvision.models.list_models(module=torchvision.models))


def check_arch(arch: str) -> None:
    """DdpimgError listing close names when ``arch`` is no torchvision classification model."""
    names = classification_models()
    if arch in names:
        return
    close = difflib.get_close_matches(arch, names, n=5, cutoff=0.5)
    suggestion = f"did you mean {', '.join(close)}? " if close else ""
    raise DdpimgError(
        f"--arch {arch} is not a torchvision classification model",
        hint=f"{suggestion}{len(names)} models, e.g. resnet18, resnet50, vit_b_16; list them "
        "with python -c 'import torchvision; print(torchvision.models.list_models("
        "module=torchvision.models))'",
    )


def model_arguments(arch: str, image_size: int, num_classes: int) -> dict[str, Any]:
    """Keyword arguments for torchvision's builder: the class count, the image size for the
    models that are built for one, and no auxiliary heads (their extra outputs are not
    a tensor of logits)."""
    arguments: dict[str, Any] = {"weights": None, "num_classes": num_classes}
    if arch.startswith("vit_"):
        arguments["image_size"] = image_size
    if arch in ("googlenet", "inception_v3"):
        arguments |= {"aux_logits": False, "init_weights": True}
    return arguments


class ResnetTask:
    """``train resnet``."""

    eval_batch_size = 256

    def __init__(self, config: TrainConfig, ctx: DistContext) -> None:
        self.config = config
        self.ctx = ctx
        self.arch = config.arch or DEFAULT_ARCH
        check_arch(self.arch)
        self.image_size = config.image_size or DEFAULT_IMAGE_SIZE

    @cached_property
    def num_classes(self) -> int:
        """ImageNet's 1000 for synthetic data, else the ImageFolder tree's class folders."""
        if self.config.data == SYNTHETIC:
            return IMAGENET_CLASSES
        return len(image_folder_classes(Path(self.config.data)))

    def load(self) -> tuple[Dataset, Dataset]:
        config, device = self.config, self.ctx.device
        channels_last = device.type == "cuda"
        if config.data == SYNTHETIC:
            return synthetic_imagenet(
                self.image_size,
                train_samples=config.train_samples,
                eval_samples=config.eval_samples,
                device=device,
                channels_last=channels_last,
            )
        data = load_image_folder(
            Path(config.data),
            self.image_size,
            train_samples=config.train_samples,
            eval_samples=config.eval_samples,
            device=device,
            channels_last=channels_last,
        )
        return data.train, data.eval

    def build_model(self, dropout: DropoutContext) -> nn.Module:
        import torchvision

        device = self.ctx.device
        model: nn.Module = torchvision.models.get_model(
            self.arch, **model_arguments(self.arch, self.image_size, self.num_classes)
        )
        if self.sync_batchnorm():
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # type: ignore[no-untyped-call]
        model = model.to(device)
        if device.type == "cuda":
            model = model.to(memory_format=torch.channels_last)
            if not self.config.deterministic:
                torch.backends.cudnn.benchmark = True
        return model

    def sync_batchnorm(self) -> bool:
        """Whether BatchNorm takes the global batch's statistics (see the module docstring)."""
        wanted = self.config.sync_batchnorm
        on_gpus = self.ctx.device.type == "cuda"
        several = self.ctx.world_size > 1
        if wanted and not on_gpus and several:
            raise DdpimgError(
                "--sync-batchnorm needs GPUs: torch's SyncBatchNorm refuses CPU tensors",
                hint="drop --sync-batchnorm on the CPU (BatchNorm then uses each rank's slice)",
            )
        return wanted is not False and on_gpus and several

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.float(), target, reduction="none")

    def correct(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (output.argmax(dim=1) == target).sum()

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        world_size = self.ctx.world_size
        global_batch = self.config.per_rank_batch(world_size) * world_size
        return torch.optim.SGD(
            model.parameters(),
            lr=self.config.learning_rate(SPEC.learning_rate * global_batch / 256),
            momentum=MOMENTUM,
            weight_decay=WEIGHT_DECAY,
        )

    def throughput(self, samples_per_s: float, world_size: int) -> dict[str, float | None]:
        return {"images_per_s": samples_per_s}
