"""FSDP2 in one process (1-rank gloo group): sharding units, the optimizer handed over,
the same trajectory as DDP, and DCP checkpoints.

The trajectory's tolerance (tests/noise.py; AMD EPYC, 2026-11-25): DDP with 1 thread
instead of 2, or with torch's default kernels, parted from DDP by at most 4.2e-8 over the
6 steps and 2 evaluations of each trainer here, under one float32 step (the floor, 1.2e-7);
FSDP was bitwise DDP's. 10x the floor."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.tensor import DTensor

from ddpimg.errors import DdpimgError
from ddpimg.runtime.context import DistContext
from ddpimg.train.batch import BatchLayout
from ddpimg.train.config import TrainConfig
from ddpimg.train.dropout import DropoutContext
from ddpimg.train.loop import Trainer
from ddpimg.train.outputs import RunRecorder
from ddpimg.train.progress import Progress
from ddpimg.train.strategies import STRATEGIES
from ddpimg.train.strategies.fsdp import FsdpStrategy, shard_units
from ddpimg.train.tasks import TRAINERS
from ddpimg.train.tasks.gpt import SIZES, GptOptions
from ddpimg.train.tasks.gpt.model import Block, Gpt
from ddpimg.train.tasks.mnist.task import MnistNet
from tests.noise import FLOAT32_STEP, Tolerance, assert_within


def test_units_are_the_blocks() -> None:
    gpt = Gpt(SIZES["tiny"].shape)
    assert shard_units(gpt) == list(gpt.h)
    assert all(isinstance(unit, Block) for unit in shard_units(gpt))


def test_units_of_a_resnet_are_its_residual_blocks() -> None:
    import torchvision
    from torchvision.models.resnet import BasicBlock

    units = shard_units(torchvision.models.resnet18())
    assert len(units) == 8
    assert all(isinstance(unit, BasicBlock) for unit in units)


def test_a_model_without_containers_is_one_unit() -> None:
    assert shard_units(MnistNet(DropoutContext(1))) == []


def test_units_skip_elements_without_parameters() -> None:
    model = nn.Sequential()
    model.add_module("body", nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)))
    body = model.body
    assert shard_units(model) == [body[0], body[2]]


def wrapped_gpt(ctx: DistContext, tmp_path: Path) -> tuple[FsdpStrategy, nn.Module]:
    config = TrainConfig(
        trainer="gpt", options=GptOptions(size="tiny"), strategy="fsdp", out=tmp_path
    )
    task = TRAINERS["gpt"].factory(config, ctx, BatchLayout.of(config, ctx.world_size))
    torch.manual_seed(0)
    model = task.build_model(DropoutContext(1))
    strategy = FsdpStrategy(config, ctx)
    return strategy, strategy.wrap(model, task.make_optimizer)


def test_wrap_shards_and_hands_the_optimizer_the_sharded_parameters(
    ctx: DistContext, tmp_path: Path
) -> None:
    strategy, model = wrapped_gpt(ctx, tmp_path)
    parameters = list(model.parameters())
    assert all(isinstance(p, DTensor) for p in parameters)
    grouped = [p for group in strategy.optimizer.param_groups for p in group["params"]]
    assert {id(p) for p in grouped} == {id(p) for p in parameters}
    # The task's groups survive: matrices decay, vectors do not.
    decay, no_decay = strategy.optimizer.param_groups
    assert decay["weight_decay"] == 0.1
    assert all(p.dim() == 2 for p in decay["params"])
    assert all(p.dim() == 1 for p in no_decay["params"])


def test_a_step_moves_the_sharded_parameters(ctx: DistContext, tmp_path: Path) -> None:
    strategy, model = wrapped_gpt(ctx, tmp_path)
    before = [p.detach().full_tensor().clone() for p in model.parameters()]
    tokens = torch.randint(256, (4, 17))
    strategy.backward(
        nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    )
    strategy.step()
    strategy.zero_grad()
    after = [p.detach().full_tensor() for p in model.parameters()]
    assert all(not torch.equal(b, a) for b, a in zip(before, after, strict=True))
    assert all(p.grad is None for p in model.parameters())


def metrics(config: TrainConfig, ctx: DistContext) -> list[dict[str, Any]]:
    config.out.mkdir()
    recorder = RunRecorder(config.out, {}, Progress(io.StringIO(), interactive=False))
    batch = BatchLayout.of(config, ctx.world_size)
    task = TRAINERS[config.trainer].factory(config, ctx, batch)
    strategy = STRATEGIES[config.strategy].factory(config, ctx, batch)
    Trainer(config, ctx, task, strategy, recorder, batch=batch).run()
    recorder.finish("completed", 0)
    lines = (config.out / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if '"summary"' not in line]


@pytest.mark.parametrize("trainer", ["mnist", "gpt"])
def test_fsdp_follows_the_ddp_trajectory(
    ctx: DistContext, make_config: Callable[..., TrainConfig], trainer: str
) -> None:
    extra: dict[str, Any] = {"size": "tiny", "seq_len": 16} if trainer == "gpt" else {}
    base = make_config(trainer=trainer, train_samples=32, max_steps=6, **extra)
    ddp = metrics(replace(base, out=base.out / "ddp"), ctx)
    fsdp = metrics(replace(base, strategy="fsdp", out=base.out / "fsdp"), ctx)
    assert [(m["kind"], m["epoch"]) for m in fsdp] == [(m["kind"], m["epoch"]) for m in ddp]
    losses = [m["loss"] for m in ddp]
    tolerance = Tolerance(floor=FLOAT32_STEP, multiple=10, steps=len(losses))
    assert_within([m["loss"] for m in fsdp], losses, tolerance, f"{trainer}: FSDP vs DDP")


def test_checkpoint_round_trip(ctx: DistContext, tmp_path: Path) -> None:
    strategy, model = wrapped_gpt(ctx, tmp_path)
    tokens = torch.randint(256, (4, 17))

    def step() -> None:
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        strategy.backward(loss)
        strategy.step()
        strategy.zero_grad()

    step()
    strategy.optimizer.param_groups[0]["lr"] = 0.0005
    saved = tmp_path / "checkpoint"
    saved.mkdir()
    strategy.save(saved)
    expected = [p.detach().full_tensor().clone() for p in model.parameters()]
    step()
    expected_after = [p.detach().full_tensor().clone() for p in model.parameters()]

    # A fresh model and optimizer, loaded, take the same next step.
    other, other_model = wrapped_gpt(ctx, tmp_path)
    other.load(saved, 1)
    assert other.optimizer.param_groups[0]["lr"] == 0.0005
    loaded = [p.detach().full_tensor() for p in other_model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(loaded, expected, strict=True))
    strategy, model = other, other_model
    step()
    after = [p.detach().full_tensor() for p in model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(after, expected_after, strict=True))


def test_a_checkpoint_of_another_model_is_an_error(ctx: DistContext, tmp_path: Path) -> None:
    strategy, _ = wrapped_gpt(ctx, tmp_path)
    saved = tmp_path / "checkpoint"
    saved.mkdir()
    strategy.save(saved)
    mnist = MnistNet(DropoutContext(1))
    other = FsdpStrategy(TrainConfig(strategy="fsdp", out=tmp_path), ctx)
    other.wrap(mnist, lambda m: torch.optim.Adadelta(m.parameters()))
    with pytest.raises(DdpimgError, match=rf"checkpoint {saved} does not fit this model and "):
        other.load(saved, 1)


def test_bf16_computes_in_bf16(ctx: DistContext, tmp_path: Path) -> None:
    config = TrainConfig(strategy="fsdp", precision="bf16", out=tmp_path)
    model = nn.Sequential(nn.Linear(4, 4))
    strategy = FsdpStrategy(config, ctx)
    wrapped = strategy.wrap(model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    assert wrapped(torch.ones(2, 4)).dtype == torch.bfloat16
    # The optimizer's (sharded) parameters stay fp32.
    assert all(p.dtype == torch.float32 for p in strategy.optimizer.param_groups[0]["params"])


def test_fp16_computes_in_fp16_and_saves_the_loss_scale(ctx: DistContext, tmp_path: Path) -> None:
    config = TrainConfig(strategy="fsdp", precision="fp16", out=tmp_path)
    model = nn.Sequential(nn.Linear(4, 4))
    strategy = FsdpStrategy(config, ctx)
    wrapped = strategy.wrap(model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    output = wrapped(torch.ones(2, 4))
    assert output.dtype == torch.float16
    strategy.backward(output.float().sum() * math.inf)  # an overflow: the step is skipped
    strategy.step()
    saved = tmp_path / "checkpoint"
    saved.mkdir()
    strategy.save(saved)
    other_model = nn.Sequential(nn.Linear(4, 4))
    other = FsdpStrategy(config, ctx)
    other.wrap(other_model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    other.load(saved, 1)
    assert other.scaler.state_dict()["scale"] == strategy.scaler.state_dict()["scale"] == 2.0**15


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_channels_last_batchnorm_model_trains(
    ctx: DistContext, tmp_path: Path, precision: str
) -> None:
    """ResNet is channels_last on a GPU, and FSDP2 refused it there (the GPU runbook's
    matrix on an H200, 2026-11-27: ``FSDP does not support non-contiguous parameters yet``);
    with bf16, BatchNorm's bf16 weights then met its float32 running statistics (``expected
    scalar type BFloat16 but found Float``, on the CPU too). A training forward and backward
    under the loop's autocast."""
    import torchvision

    config = TrainConfig(
        trainer="gpt", options=GptOptions(size="tiny"), strategy="fsdp", out=tmp_path,
        precision=precision,
    )  # fmt: skip
    model = torchvision.models.resnet18(num_classes=10).to(memory_format=torch.channels_last)
    sharded = FsdpStrategy(config, ctx).wrap(
        model, lambda module: torch.optim.SGD(module.parameters(), lr=0.1)
    )
    images = torch.randn(4, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        output = sharded(images)
    assert output.shape == (4, 10)
    output.float().sum().backward()
    assert all(parameter.grad is not None for parameter in sharded.parameters())
