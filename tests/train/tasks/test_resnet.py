from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from ddpimg.errors import DdpimgError
from ddpimg.train.config import TrainConfig
from ddpimg.train.dropout import DropoutContext
from ddpimg.train.tasks.resnet.task import ResnetTask, check_arch, model_arguments
from tests.train.contexts import single_process

CPU = single_process()


def resnet(tmp_path: Path, **overrides: object) -> TrainConfig:
    fields: dict[str, object] = {
        "trainer": "resnet",
        "arch": "resnet18",
        "image_size": 32,
        "train_samples": 64,
        "eval_samples": 16,
        "out": tmp_path,
    } | overrides
    return TrainConfig(**fields)  # type: ignore[arg-type]


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


def test_unknown_arch_fails_when_the_task_is_made(tmp_path: Path) -> None:
    with pytest.raises(DdpimgError, match=r"--arch resnet51 is not"):
        ResnetTask(resnet(tmp_path, arch="resnet51"), CPU)


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


def test_default_is_resnet50_at_224(tmp_path: Path) -> None:
    task = ResnetTask(TrainConfig(trainer="resnet", out=tmp_path), CPU)
    assert (task.arch, task.image_size) == ("resnet50", 224)


def test_model_classifies_into_imagenets_classes(tmp_path: Path) -> None:
    task = ResnetTask(resnet(tmp_path), CPU)
    train_set, _ = task.load()
    model = task.build_model(DropoutContext(1))
    inputs, labels = train_set.batch(torch.tensor([0, 1, 2]))
    output = model(inputs)
    assert output.shape == (3, 1000)
    assert task.loss(output, labels).shape == (3,)
    # One process on the CPU: plain BatchNorm.
    assert not any(isinstance(m, nn.SyncBatchNorm) for m in model.modules())


@pytest.mark.parametrize(
    ("flag", "device", "world_size", "expected"),
    [
        (None, "cuda", 2, True),
        (None, "cuda", 1, False),
        (False, "cuda", 2, False),
        (True, "cuda", 2, True),
        (None, "cpu", 2, False),
        (True, "cpu", 1, False),
    ],
)
def test_sync_batchnorm_with_several_gpu_ranks(
    tmp_path: Path, flag: bool | None, device: str, world_size: int, expected: bool
) -> None:
    task = ResnetTask(resnet(tmp_path, sync_batchnorm=flag), single_process(device, world_size))
    assert task.sync_batchnorm() is expected


def test_sync_batchnorm_asked_on_the_cpu_is_an_error(tmp_path: Path) -> None:
    task = ResnetTask(resnet(tmp_path, sync_batchnorm=True), single_process("cpu", 2))
    with pytest.raises(DdpimgError, match=r"--sync-batchnorm needs GPUs: torch's SyncBatchNorm"):
        task.sync_batchnorm()


@pytest.mark.parametrize(("batch", "lr"), [(32, 0.0125), (256, 0.1), (1024, 0.4)])
def test_sgd_learning_rate_scales_with_the_global_batch(
    tmp_path: Path, batch: int, lr: float
) -> None:
    task = ResnetTask(resnet(tmp_path, batch_size=batch), CPU)
    optimizer = task.make_optimizer(nn.Linear(2, 2))
    assert isinstance(optimizer, torch.optim.SGD)
    group = optimizer.param_groups[0]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (
        pytest.approx(lr),
        0.9,
        1e-4,
    )


def test_lr_flag_wins(tmp_path: Path) -> None:
    task = ResnetTask(resnet(tmp_path, lr=0.5), CPU)
    assert task.make_optimizer(nn.Linear(2, 2)).param_groups[0]["lr"] == 0.5


def test_throughput_is_images(tmp_path: Path) -> None:
    assert ResnetTask(resnet(tmp_path), CPU).throughput(12.5, 4) == {"images_per_s": 12.5}
