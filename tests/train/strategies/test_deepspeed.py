"""DeepSpeed as a strategy: its configuration from the flags, the global batch checked early,
and ZeRO-1 in one process following DDP's trajectory.

That trajectory's tolerance (tests/noise.py; AMD EPYC, 2026-11-25): DDP with 1 thread
instead of 2, or with torch's default kernels, parted from DDP by at most 2.6e-8 over the 4
steps and 2 evaluations, under one float32 step (the floor, 1.2e-7); ZeRO-1 was bitwise
DDP's. 10x the floor.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch

from ddpimg.errors import DdpimgError
from ddpimg.runtime.context import DistContext
from ddpimg.train.batch import BatchLayout
from ddpimg.train.config import TrainConfig
from ddpimg.train.loop import Trainer
from ddpimg.train.outputs import RunRecorder
from ddpimg.train.progress import Progress
from ddpimg.train.strategies import STRATEGIES
from ddpimg.train.strategies.deepspeed import deepspeed_config
from ddpimg.train.tasks.mnist.task import MnistTask
from tests.noise import FLOAT32_STEP, Tolerance, assert_within


@pytest.mark.parametrize(
    ("precision", "stage", "parameters", "bucket"),
    [
        ("fp32", 0, 1_199_882, 1_199_882),
        ("bf16", 3, 10**10, 500_000_000),
        # ZeRO-1/2 refuse a bucket that is not a multiple of 2 elements.
        ("fp32", 2, 77, 78),
    ],
)
def test_config_follows_the_flags(precision: str, stage: int, parameters: int, bucket: int) -> None:
    config = deepspeed_config(BatchLayout(16, 4), stage, precision, parameters)
    assert config["train_batch_size"] == 64
    assert config["train_micro_batch_size_per_gpu"] == 16
    assert config["gradient_accumulation_steps"] == 1
    assert config["zero_optimization"] == {
        "stage": stage,
        "reduce_bucket_size": bucket,
        "allgather_bucket_size": bucket,
    }
    assert config["bf16"] == {"enabled": precision == "bf16"}
    # BatchNorm's running statistics follow its half weights.
    assert config.get("data_types") == ({"buffer_dtype": "bf16"} if precision == "bf16" else None)
    # DeepSpeed would otherwise clip to 1.0 and leave DDP's trajectory.
    assert config["gradient_clipping"] == 0.0


def test_accumulation_is_deepspeeds_own() -> None:
    config = deepspeed_config(BatchLayout(64, 2, 8), 2, "fp32", 1000)
    assert (config["train_batch_size"], config["train_micro_batch_size_per_gpu"]) == (128, 8)
    assert config["gradient_accumulation_steps"] == 8


def metrics(
    config: TrainConfig, ctx: DistContext, trainer: type[Trainer] = Trainer
) -> list[dict[str, Any]]:
    recorder = RunRecorder(config.out, {}, Progress(io.StringIO(), interactive=False))
    batch = BatchLayout.of(config, ctx.world_size)
    strategy = STRATEGIES[config.strategy].factory(config, ctx, batch)
    trainer(config, ctx, MnistTask(config, ctx), strategy, recorder, batch=batch).run()
    recorder.finish("completed", 0)
    lines = (config.out / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if '"summary"' not in line]


@pytest.mark.deepspeed
def test_zero1_follows_the_ddp_trajectory(
    ctx: DistContext, make_config: Callable[..., TrainConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    # DeepSpeed reads LOCAL_RANK from the environment; the launcher side exports it.
    monkeypatch.setenv("LOCAL_RANK", "0")
    # Two epochs of two steps: the per-epoch learning rate decay reaches DeepSpeed too.
    base = make_config(train_samples=16, max_steps=4, gamma=0.1)
    ddp = metrics(base, ctx)
    zero1 = metrics(replace(base, strategy="deepspeed", zero_stage=1), ctx)
    assert [(m["kind"], m["epoch"]) for m in zero1] == [(m["kind"], m["epoch"]) for m in ddp]
    losses = [m["loss"] for m in ddp]
    tolerance = Tolerance(floor=FLOAT32_STEP, multiple=10, steps=len(losses))
    assert_within([m["loss"] for m in zero1], losses, tolerance, "ZeRO-1 vs DDP")


@pytest.mark.deepspeed
def test_missing_local_rank_is_named(
    ctx: DistContext, make_config: Callable[..., TrainConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("OMPI_COMM_WORLD_LOCAL_RANK", raising=False)
    config = make_config(strategy="deepspeed")
    with pytest.raises(DdpimgError, match=r"needs LOCAL_RANK in the environment, which is unset"):
        metrics(config, ctx)


@pytest.mark.deepspeed
def test_fp16_where_deepspeed_cannot_is_refused_clearly(
    ctx: DistContext, make_config: Callable[..., TrainConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().is_fp16_supported():
        pytest.skip(f"DeepSpeed's {get_accelerator().device_name()} accelerator supports fp16")
    monkeypatch.setenv("LOCAL_RANK", "0")
    config = make_config(strategy="deepspeed", precision="fp16")
    with pytest.raises(DdpimgError, match=r"--precision fp16 with --strategy deepspeed: "):
        metrics(config, ctx)


@pytest.mark.deepspeed
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_channels_last_model_takes_float_images_without_autocast(
    ctx: DistContext,
    make_config: Callable[..., TrainConfig],
    monkeypatch: pytest.MonkeyPatch,
    precision: str,
) -> None:
    """What the GPU runbook's matrix found on an H200 (2026-11-27): ResNet, channels_last on
    a GPU, failed DeepSpeed's initialize (``self.stride(-1) must be 1 to view Float as
    Byte``), and with bf16 every image model failed its first layer (``Input type (float) and
    bias type (c10::BFloat16)``): DeepSpeed switches a CUDA autocast off around its forward.
    Here the forward runs with no autocast, as it does on a GPU."""
    import torchvision

    monkeypatch.setenv("LOCAL_RANK", "0")
    config = make_config(strategy="deepspeed", zero_stage=1, precision=precision)
    strategy = STRATEGIES["deepspeed"].factory(config, ctx, BatchLayout.of(config, 1))
    model = torchvision.models.resnet18(num_classes=10).to(memory_format=torch.channels_last)
    engine = strategy.wrap(model, lambda module: torch.optim.SGD(module.parameters(), lr=0.1))
    images = torch.randn(2, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    output = engine(images)
    assert output.shape == (2, 10)
    assert output.dtype == {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]


@pytest.mark.deepspeed
def test_zero3_compiles_in_the_first_step_only(
    ctx: DistContext, make_config: Callable[..., TrainConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compiled, ZeRO-3 traced DeepSpeed's per-submodule hooks and recompiled them for every
    submodule and call, past dynamo's limit of 8 recompiles of one function in the first
    steps (``hooks_outside_graphs``). Counted by dynamo's compile-start callback, with a hit
    of the limit made an error: the first step compiles, the next ones reuse its graphs (the
    evaluation compiles its own), and the compiled losses are the eager run's."""
    import torch._dynamo
    from torch._dynamo.callback import callback_handler

    monkeypatch.setenv("LOCAL_RANK", "0")
    eager = make_config(strategy="deepspeed", zero_stage=3, train_samples=24, max_steps=3)
    (eager.out / "compiled").mkdir()
    compiled = replace(eager, compile=True, compile_backend="aot_eager", out=eager.out / "compiled")
    compiles: list[int] = []
    per_step: list[int] = []

    class Counted(Trainer):
        def train_step(self, micro_batches: Any) -> None:
            before = len(compiles)
            super().train_step(micro_batches)
            per_step.append(len(compiles) - before)

    def started(_: object) -> None:
        compiles.append(1)

    torch._dynamo.reset()
    callback_handler.register_start_callback(started)
    try:
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
            losses = [m["loss"] for m in metrics(compiled, ctx, Counted)]
    finally:
        callback_handler.remove_start_callback(started)
        torch._dynamo.reset()
    assert per_step[0] > 0
    assert per_step[1:] == [0] * (len(per_step) - 1)
    expected = [m["loss"] for m in metrics(eager, ctx)]
    tolerance = Tolerance(floor=FLOAT32_STEP, multiple=10, steps=len(expected))
    assert_within(losses, expected, tolerance, "ZeRO-3 compiled vs eager")
