from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from ddpimg.errors import DdpimgError
from ddpimg.runtime.context import DistContext
from ddpimg.train.batch import BatchLayout
from ddpimg.train.batchnorm import GlobalBatchNorm
from ddpimg.train.config import TrainConfig
from ddpimg.train.dropout import DropoutContext
from ddpimg.train.tasks.resnet.synthetic import SyntheticImages
from ddpimg.train.tasks.resnet.task import ResnetTask
from tests.train.configs import trainer_config
from tests.train.contexts import single_process

CPU = single_process()


def task_of(config: TrainConfig, ctx: DistContext = CPU) -> ResnetTask:
    return ResnetTask(config, ctx, BatchLayout.of(config, ctx.world_size))


def resnet(tmp_path: Path, **overrides: object) -> TrainConfig:
    fields = {
        "arch": "resnet18",
        "image_size": 32,
        "train_samples": 64,
        "eval_samples": 16,
        "out": tmp_path,
    }
    return trainer_config("resnet", **fields | overrides)


def test_unknown_arch_fails_when_the_task_is_made(tmp_path: Path) -> None:
    with pytest.raises(DdpimgError, match=r"--arch resnet51 is not"):
        task_of(resnet(tmp_path, arch="resnet51"))


def test_default_is_resnet50_at_224(tmp_path: Path) -> None:
    task = task_of(TrainConfig(trainer="resnet", out=tmp_path))
    assert (task.arch, task.image_size) == ("resnet50", 224)


def test_model_classifies_into_imagenets_classes(tmp_path: Path) -> None:
    task = task_of(resnet(tmp_path))
    train_set, _ = task.datasets()
    model = task.build_model(DropoutContext(1))
    assert isinstance(train_set, SyntheticImages)
    inputs, labels = train_set.batch(torch.tensor([0, 1, 2]))
    output = model(inputs)
    assert output.shape == (3, 1000)
    assert task.loss(output, labels).shape == (3,)
    # On the CPU BatchNorm is ddpimg's, over the global batch.
    assert any(isinstance(m, GlobalBatchNorm) for m in model.modules())
    assert task.data_facts() == {"source": "synthetic", "train_samples": 64, "eval_samples": 16}


@pytest.mark.parametrize(
    ("flag", "device", "world_size", "expected"),
    [
        (None, "cuda", 2, "sync"),
        (None, "cuda", 1, "local"),
        (False, "cuda", 2, "local"),
        (True, "cuda", 2, "sync"),
        (None, "cpu", 2, "global"),
        (None, "cpu", 1, "global"),
        (True, "cpu", 4, "global"),
        (False, "cpu", 2, "local"),
    ],
)
def test_batchnorm_is_over_the_global_batch_unless_switched_off(
    tmp_path: Path, flag: bool | None, device: str, world_size: int, expected: str
) -> None:
    task = task_of(resnet(tmp_path, sync_batchnorm=flag), single_process(device, world_size))
    assert task.batchnorm() == expected


@pytest.mark.parametrize(
    ("arch", "flag", "world_size", "expected"),
    [
        ("resnet18", None, 4, 4 * 8),  # synchronised: every rank's micro-batch
        ("resnet18", False, 4, 8),  # per rank: its own micro-batch
        ("resnet18", None, 1, 8),
        ("vit_b_16", None, 4, None),  # LayerNorm: no statistics across samples
    ],
)
def test_batchnorm_samples_are_a_forward_pass_of_the_statistics_group(
    tmp_path: Path, arch: str, flag: bool | None, world_size: int, expected: int | None
) -> None:
    config = resnet(tmp_path, arch=arch, sync_batchnorm=flag, batch_size=32, micro_batch_size=8)
    task = task_of(config, single_process("cpu", world_size))
    assert task.batchnorm_samples() == expected
    assert task.fingerprint() == ({} if expected is None else {"batchnorm_samples": expected})


@pytest.mark.parametrize(("batch", "lr"), [(32, 0.0125), (256, 0.1), (1024, 0.4)])
def test_sgd_learning_rate_scales_with_the_global_batch(
    tmp_path: Path, batch: int, lr: float
) -> None:
    task = task_of(resnet(tmp_path, batch_size=batch))
    optimizer = task.make_optimizer(nn.Linear(2, 2))
    assert isinstance(optimizer, torch.optim.SGD)
    group = optimizer.param_groups[0]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (
        pytest.approx(lr),
        0.9,
        1e-4,
    )


def test_lr_flag_wins(tmp_path: Path) -> None:
    task = task_of(resnet(tmp_path, lr=0.5))
    assert task.make_optimizer(nn.Linear(2, 2)).param_groups[0]["lr"] == 0.5


def test_throughput_is_images(tmp_path: Path) -> None:
    assert task_of(resnet(tmp_path)).throughput(12.5, 4) == {"images_per_s": 12.5}
