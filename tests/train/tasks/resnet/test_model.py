from __future__ import annotations

import pytest
import torch
from torch import nn

from ddpimg.errors import DdpimgError
from ddpimg.train.batchnorm import GlobalBatchNorm
from ddpimg.train.dropout import (
    BatchPosition,
    DropoutContext,
    GlobalBatchDropout,
    GlobalStochasticDepth,
)
from ddpimg.train.tasks.resnet.model import (
    build_classifier,
    check_arch,
    model_arguments,
    replace_random_layers,
)


@pytest.mark.parametrize("arch", ["resnet50", "resnet18", "vit_b_16", "efficientnet_b0"])
def test_torchvision_classifiers_are_accepted(arch: str) -> None:
    check_arch(arch)


@pytest.mark.parametrize(
    ("arch", "message"),
    [
        ("resnet5", r"--arch resnet5 is not a torchvision classification model\n  hint: did you "
         r"mean resnet50, .*\? \d+ models, e\.g\. resnet18"),
        ("fasterrcnn_resnet50_fpn", r"--arch fasterrcnn_resnet50_fpn is not a torchvision "
         r"classification model"),
        ("zzz", r"hint: \d+ models, e\.g\. resnet18, resnet50, vit_b_16; list them with"),
    ],
)  # fmt: skip
def test_unknown_arch_lists_close_names(arch: str, message: str) -> None:
    with pytest.raises(DdpimgError, match=message):
        check_arch(arch)


@pytest.mark.parametrize(
    ("arch", "extra"),
    [
        ("resnet50", {}),
        ("vit_b_16", {"image_size": 64}),
        ("inception_v3", {"aux_logits": False, "init_weights": True}),
    ],
)
def test_model_arguments(arch: str, extra: dict[str, object]) -> None:
    assert model_arguments(arch, 64, 10) == {"weights": None, "num_classes": 10} | extra


def test_random_layers_become_global_batch_ones_numbered_in_order() -> None:
    from torchvision.ops import StochasticDepth

    model = nn.Sequential(
        nn.Linear(4, 4),
        nn.Dropout(0.2),
        nn.Sequential(StochasticDepth(0.1, "row")),
        nn.Dropout(0.5),
    )
    context = DropoutContext(3)
    converted = replace_random_layers(model, context)
    kinds = [type(m) for m in converted.modules() if not isinstance(m, (nn.Sequential, nn.Linear))]
    assert kinds == [GlobalBatchDropout, GlobalStochasticDepth, GlobalBatchDropout]
    layers = [m.layer for m in converted.modules() if hasattr(m, "layer")]
    assert layers == [1, 2, 3]
    assert converted[1].p == 0.2
    assert converted[2][0].mode == "row"


@pytest.mark.parametrize(
    ("batchnorm", "kind"), [("global", GlobalBatchNorm), ("local", nn.BatchNorm2d)]
)
def test_a_squeezenet_draws_nothing_from_the_global_generator(batchnorm: str, kind: type) -> None:
    # torchvision's squeezenet has an nn.Dropout in its classifier: converted, a training
    # step leaves torch's global generator untouched.
    context = DropoutContext(1)
    model = build_classifier(
        "squeezenet1_1", image_size=64, num_classes=5, dropout=context, batchnorm=batchnorm,
        device=torch.device("cpu"),
    )  # fmt: skip
    assert not any(type(m) is nn.Dropout for m in model.modules())
    context.position = BatchPosition(step=1, offset=0, global_batch=2)
    inputs = torch.randn(2, 3, 64, 64)
    before = torch.get_rng_state()
    model.train()
    model(inputs).sum().backward()
    assert torch.equal(before, torch.get_rng_state())
    resnet = build_classifier(
        "resnet18", image_size=32, num_classes=5, dropout=context, batchnorm=batchnorm,
        device=torch.device("cpu"),
    )  # fmt: skip
    assert any(type(m) is kind for m in resnet.modules())
