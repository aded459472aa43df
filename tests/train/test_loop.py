"""The training loop in one process (1-rank gloo group): steps, epochs, loss, determinism."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch

from ddpimg.errors import DataError
from ddpimg.runtime.context import DistContext
from ddpimg.train import config as config_module
from ddpimg.train.batch import BatchLayout
from ddpimg.train.config import TrainConfig
from ddpimg.train.loop import Summary, Trainer
from ddpimg.train.outputs import RunRecorder
from ddpimg.train.progress import Progress
from ddpimg.train.sharding import EvalShard
from ddpimg.train.strategies.ddp import DdpStrategy
from ddpimg.train.tasks.mnist.task import MnistTask
from tests.noise import FLOAT32_STEP, Tolerance, assert_within, floor_between


def run(config: TrainConfig, ctx: DistContext) -> tuple[Summary, list[dict[str, Any]]]:
    """Train with rank 0's real recorder; returns the summary and the metrics lines."""
    recorder = RunRecorder(config.out, {}, Progress(io.StringIO(), interactive=False))
    batch = BatchLayout.of(config, ctx.world_size)
    summary = Trainer(
        config, ctx, MnistTask(config, ctx), DdpStrategy(config, ctx), recorder, batch=batch
    ).run()
    recorder.finish("completed", 0)
    lines = (config.out / "metrics.jsonl").read_text().splitlines()
    return summary, [json.loads(line) for line in lines]


def losses(lines: list[dict[str, Any]], kind: str = "train") -> list[float]:
    return [line["loss"] for line in lines if line["kind"] == kind]


def test_loss_goes_down(ctx: DistContext, make_config: Callable[..., TrainConfig]) -> None:
    config = make_config(batch_size=16, train_samples=480, max_steps=30, eval_samples=200)
    summary, lines = run(config, ctx)
    trajectory = losses(lines)
    assert len(trajectory) == 30
    first, last = sum(trajectory[:5]) / 5, sum(trajectory[-5:]) / 5
    assert last < 0.6 * first, trajectory
    assert summary.eval_accuracy > 0.5


def test_deterministic_repeats_are_bitwise_identical(
    ctx: DistContext, make_config: Callable[..., TrainConfig]
) -> None:
    config = make_config(deterministic=True, max_steps=4)
    first, first_lines = run(config, ctx)
    second, second_lines = run(config, ctx)
    assert losses(first_lines) == losses(second_lines)
    assert losses(first_lines, "eval") == losses(second_lines, "eval")
    assert first.final_loss == second.final_loss
    assert torch.are_deterministic_algorithms_enabled()


def test_seed_changes_the_trajectory(
    ctx: DistContext, make_config: Callable[..., TrainConfig]
) -> None:
    _, one = run(make_config(max_steps=2), ctx)
    _, two = run(make_config(max_steps=2, seed=2), ctx)
    assert losses(one) != losses(two)


def test_max_steps_spans_epochs_and_evaluates_the_last(
    ctx: DistContext, make_config: Callable[..., TrainConfig]
) -> None:
    # 36 samples / 8 = 4 steps an epoch (the last 4 samples dropped); stop at step 6.
    config = make_config(train_samples=36, max_steps=6, log_every=2, epochs=5)
    summary, lines = run(config, ctx)
    assert [(line["kind"], line["epoch"], line.get("step")) for line in lines] == [
        ("train", 1, 2),
        ("train", 1, 4),
        ("eval", 1, 4),
        ("train", 2, 6),
        ("eval", 2, 6),
    ]
    assert (summary.steps, summary.epochs) == (6, 2)
    assert summary.final_loss == losses(lines)[-1]


def test_epochs_end_the_run_without_max_steps(
    ctx: DistContext, make_config: Callable[..., TrainConfig]
) -> None:
    # The last step is no log point: the final loss is reduced on its own.
    config = make_config(train_samples=16, max_steps=0, epochs=3, log_every=7)
    summary, lines = run(config, ctx)
    assert (summary.steps, summary.epochs) == (6, 3)
    assert [line["kind"] for line in lines] == ["eval", "eval", "eval"]
    assert math.isfinite(summary.final_loss)


def test_learning_rate_decays_after_each_epoch(
    ctx: DistContext, make_config: Callable[..., TrainConfig]
) -> None:
    # 2 steps an epoch: gamma changes nothing in epoch 1 and everything after it.
    config = make_config(train_samples=16, max_steps=4, deterministic=True)
    _, constant = run(replace(config, gamma=1.0), ctx)
    _, decayed = run(replace(config, gamma=0.1), ctx)
    assert losses(constant)[:3] == losses(decayed)[:3]
    assert losses(constant)[3] != losses(decayed)[3]


def test_micro_batches_train_as_one_pass(
    ctx: DistContext, make_config: Callable[..., TrainConfig]
) -> None:
    """Four micro-batches of 4 accumulated give the step of one pass over the 16 samples: the
    gradient is the mean's either way, and the dropout masks follow the samples' places in
    the global batch. The two part by rounding only, compared against the noise floor
    measured here: the same one-pass run with one intra-op thread instead of two (at least
    one float32 step). Measured (AMD EPYC, 2026-12-07, the masks hashed per unit): threads
    1.5e-8 at steps 1-2 (the floor: one float32 step), accumulation at most 5.9e-8 over the 6
    steps (0.49x the floor); the multiple is 10x that, rounded up."""
    config = make_config(batch_size=16, train_samples=128, max_steps=6)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        _, one_pass = run(config, ctx)
        _, accumulated = run(replace(config, micro_batch_size=4), ctx)
        torch.set_num_threads(1)
        _, one_thread = run(config, ctx)
    finally:
        torch.set_num_threads(threads)
    floor = floor_between(losses(one_pass), losses(one_thread))
    tolerance = Tolerance(floor=floor, multiple=5, steps=6)
    assert_within(losses(accumulated), losses(one_pass), tolerance, "4 micro-batches vs 1 pass")
    assert losses(accumulated) != losses(run(replace(config, seed=2), ctx)[1])


def test_too_few_samples_for_a_global_batch(
    ctx: DistContext, make_config: Callable[..., TrainConfig]
) -> None:
    config = make_config(train_samples=7, batch_size=8)
    message = (
        r"7 training samples do not fill one global batch of 8 \(8 per rank x 1 ranks\)\n"
        r"  hint: lower --batch-size / --global-batch-size, or raise --train-samples"
    )
    with pytest.raises(DataError, match=message):
        run(config, ctx)


def test_evaluate_matches_an_unsharded_computation(
    ctx: DistContext, make_config: Callable[..., TrainConfig]
) -> None:
    config = make_config(eval_samples=1500)
    task = MnistTask(config, ctx)
    batch = BatchLayout.of(config, 1)
    trainer = Trainer(config, ctx, task, DdpStrategy(config, ctx), None, batch=batch)
    loss, accuracy = trainer.evaluate()
    model = trainer.model
    with torch.no_grad():
        inputs, targets = MnistTask(config, ctx).datasets()[1].batch(torch.arange(1500))
        output = model(inputs)
        expected_loss = task.loss(output, targets).double().mean().item()
        expected_accuracy = task.correct(output, targets).item() / 1500
    # Batches of 8 against one of 1500 (tests/noise.py; AMD EPYC, 2026-11-25): bitwise equal
    # with 1 and 2 threads and with torch's default kernels; 10x one float32 step.
    assert_within([loss], [expected_loss], Tolerance(FLOAT32_STEP, 10, 1), "evaluate")
    assert accuracy == expected_accuracy
    assert not model.training


def test_a_rank_with_an_empty_eval_shard_still_runs_its_batch(
    ctx: DistContext, make_config: Callable[..., TrainConfig]
) -> None:
    # Rank 0 of 4 gets none of 2 samples but must run the same number of (empty) forwards.
    # Alone in its process group, it counts the 0 samples it saw: the check that the ranks
    # evaluated the whole set, each sample once, catches it.
    config = make_config(eval_samples=2)
    rank0_of_4 = replace(ctx, world_size=4)
    task = MnistTask(config, rank0_of_4)
    batch = BatchLayout.of(config, 4)
    trainer = Trainer(config, rank0_of_4, task, DdpStrategy(config, rank0_of_4), None, batch=batch)
    assert [where.stop - where.start for where in EvalShard(2, 1000, 0, 4).plan().slices] == [0]
    with pytest.raises(RuntimeError, match=r"^the ranks evaluated 0 samples, not 2$"):
        trainer.evaluate()


def test_eval_lines_count_the_samples(
    ctx: DistContext, make_config: Callable[..., TrainConfig]
) -> None:
    # A short run (2 steps of an 8-step epoch) with --eval-samples 37: those 37, all of them.
    _, lines = run(make_config(eval_samples=37, max_steps=2), ctx)
    evaluations = [line for line in lines if line["kind"] == "eval"]
    assert [(line["samples"], line["set_samples"], line["epoch"]) for line in evaluations] == [
        (37, 37, 1)
    ]


def test_a_run_that_stops_inside_its_first_epoch_evaluates_part_of_the_set(
    ctx: DistContext, make_config: Callable[..., TrainConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole synthetic test set is loaded (10,000), the short run's evaluation takes a
    part of it (here 30: the 1,024 of the default made small for a unit test), and its
    eval line and record say so."""
    monkeypatch.setattr(config_module, "SHORT_RUN_EVAL_SAMPLES", 30)
    config = make_config(eval_samples=None, max_steps=2)
    stream = io.StringIO()
    recorder = RunRecorder(config.out, {}, Progress(stream, interactive=False))
    task = MnistTask(config, ctx)
    batch = BatchLayout.of(config, ctx.world_size)
    trainer = Trainer(config, ctx, task, DdpStrategy(config, ctx), recorder, batch=batch)
    summary = trainer.run()
    recorder.finish("completed", 0)
    lines = [json.loads(line) for line in (config.out / "metrics.jsonl").read_text().splitlines()]
    evaluation = next(line for line in lines if line["kind"] == "eval")
    assert (evaluation["samples"], evaluation["set_samples"]) == (30, 10_000)
    assert evaluation["loss"] == summary.eval_loss
    assert "(eval on 30 of 10,000 samples: the run stops inside its first epoch; " in (
        stream.getvalue()
    )
    # The loss is the mean over samples 0, 333, 666, ... of the set.
    rows = torch.arange(30) * 10_000 // 30
    with torch.no_grad():
        inputs, targets = task.datasets()[1].batch(rows)
        expected = task.loss(trainer.model(inputs), targets).double().mean().item()
    assert_within([summary.eval_loss], [expected], Tolerance(FLOAT32_STEP, 10, 1), "subset")


@pytest.mark.parametrize(("warmup", "counted"), [(0, True), (4, True), (5, False)])
def test_steady_throughput_leaves_out_the_warmup_steps(
    ctx: DistContext, make_config: Callable[..., TrainConfig], warmup: int, counted: bool
) -> None:
    summary, lines = run(make_config(max_steps=5, warmup_steps=warmup), ctx)
    assert (summary.steady_samples_per_s is not None) == counted
    assert summary.to_json()["steady_samples_per_s"] == summary.steady_samples_per_s
    # MNIST has no rates of its own: the train lines keep their fields.
    assert set(lines[0]) == {"kind", "epoch", "step", "loss", "samples_per_s", "elapsed_s", "lr"}
