"""The ``resnet`` trainer's model: any torchvision classification model, made independent of
how the global batch is split over ranks.

torchvision's models draw their dropout masks (``nn.Dropout``) and stochastic-depth drops
(``torchvision.ops.StochasticDepth``) from each rank's own RNG stream, and their BatchNorm
layers normalise with the statistics of each rank's slice: 1 and N processes then part ways
from the first step. So the model is rebuilt with:

- every ``nn.Dropout`` replaced by ``GlobalBatchDropout`` and every ``StochasticDepth`` by
  ``GlobalStochasticDepth`` (each sample's draw from (seed, step, layer, its row in the
  global batch));
- with ``--sync-batchnorm`` (the default), every BatchNorm by one over the global batch:
  torch's ``SyncBatchNorm`` on GPUs with several ranks (NCCL kernels; with one rank it would
  fall back to BatchNorm anyway), ``GlobalBatchNorm`` on the CPU with any number of ranks
  (so that 1 and N processes compute the same formula).

A random layer of another kind, or a functional dropout inside a model's ``forward``, still
draws from the rank's stream; the loop notices that at the first step and warns.
"""

from __future__ import annotations

import difflib
import functools
from typing import Any

import torch
from torch import nn

from ddpimg.errors import DdpimgError
from ddpimg.train.batchnorm import convert_batchnorm
from ddpimg.train.dropout import DropoutContext, GlobalBatchDropout, GlobalStochasticDepth


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


@functools.cache
def has_batchnorm(arch: str, image_size: int) -> bool:
    """Whether ``arch`` has BatchNorm layers (ResNets, EfficientNets; not ViTs, whose
    LayerNorm takes no statistics across samples). Built on the meta device: no memory, no
    initialisation."""
    import torchvision

    with torch.device("meta"):
        model = torchvision.models.get_model(arch, **model_arguments(arch, image_size, 10))
    return any(isinstance(module, nn.modules.batchnorm._BatchNorm) for module in model.modules())


def replace_random_layers(model: nn.Module, context: DropoutContext) -> nn.Module:
    """``model`` with its ``nn.Dropout`` and ``StochasticDepth`` layers replaced by their
    global-batch versions, numbered in module order."""
    from torchvision.ops import StochasticDepth

    layer = 0

    def replaced(module: nn.Module) -> nn.Module:
        nonlocal layer
        if type(module) is nn.Dropout:
            layer += 1
            return GlobalBatchDropout(module.p, layer=layer, context=context)
        if isinstance(module, StochasticDepth):
            layer += 1
            return GlobalStochasticDepth(module.p, module.mode, layer=layer, context=context)
        for name, child in module.named_children():
            module.add_module(name, replaced(child))
        return module

    return replaced(model)


def build_classifier(
    arch: str,
    *,
    image_size: int,
    num_classes: int,
    dropout: DropoutContext,
    batchnorm: str,
    device: torch.device,
) -> nn.Module:
    """The untrained ``arch`` on ``device``; ``batchnorm``: ``local`` (per rank), ``sync``
    (torch's SyncBatchNorm) or ``global`` (``GlobalBatchNorm``)."""
    import torchvision

    model: nn.Module = torchvision.models.get_model(
        arch, **model_arguments(arch, image_size, num_classes)
    )
    model = replace_random_layers(model, dropout)
    if batchnorm == "sync":
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # type: ignore[no-untyped-call]
    elif batchnorm == "global":
        model = convert_batchnorm(model)
    model = model.to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    return model
