"""The training loop, written once for every trainer and strategy.

Per step: this rank's slice of the global batch, forward (with GlobalBatchDropout told where
the slice sits), mean loss over the slice, backward and optimizer step through the
strategy. The loss that is reported is the mean over the whole global batch: the ranks'
sums of per-sample losses, all-reduced, over the global batch size. That reduction, and
with it the only host synchronisation of the step, happens at log points only.

After each epoch: a sharded evaluation whose loss and correct-prediction sums are
all-reduced, so the mean loss and accuracy are those of the whole evaluation set. With
``--max-steps`` the loop stops at that step and still evaluates the current epoch.

Checkpoints (``ddpimg.train.checkpoint``): after every epoch, every ``--checkpoint-every``
steps, and when the ranks agree on a preemption signal (then ``Preempted`` is raised). A
resumed run starts at the checkpoint's position (epoch, steps done in it, whether its
evaluation was done) and goes on exactly as the uninterrupted run would have.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ddpimg.errors import DataError
from ddpimg.train import startup
from ddpimg.train.checkpoint.saver import Checkpointer
from ddpimg.train.checkpoint.state import LoopState
from ddpimg.train.dropout import BatchPosition, DropoutContext
from ddpimg.train.preemption import Preempted
from ddpimg.train.seeding import configure_reproducibility
from ddpimg.train.sharding import EvalShard, TrainShard, epoch_order
from ddpimg.train.tasks import epoch_schedule

if TYPE_CHECKING:
    from torch import nn

    from ddpimg.runtime.context import DistContext
    from ddpimg.train.checkpoint import Resume
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.outputs import RunRecorder
    from ddpimg.train.preemption import PreemptionWatch
    from ddpimg.train.strategies.base import Strategy
    from ddpimg.train.tasks.base import Dataset, Task


@dataclass(frozen=True)
class Summary:
    """The totals of a run (the ``summary`` line of metrics.jsonl). ``elapsed_s`` is the
    wall time of the loop, evaluations included; ``samples_per_s`` counts training time
    only; ``steady_samples_per_s`` also leaves out the first ``--warmup-steps`` steps (None
    when the run was not longer), and ``throughput`` holds the task's rates derived from it
    (images/s, tokens/s, MFU), written as fields of their own."""

    steps: int
    epochs: int
    final_loss: float
    eval_loss: float
    eval_accuracy: float
    elapsed_s: float
    samples_per_s: float
    world_size: int
    global_batch_size: int
    steps_per_epoch: int
    steady_samples_per_s: float | None = None
    throughput: dict[str, float | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        del record["throughput"]
        return record | self.throughput


def train(
    config: TrainConfig,
    ctx: DistContext,
    task: Task,
    strategy: Strategy,
    recorder: RunRecorder | None,
    *,
    resume: Resume | None = None,
    preemption: PreemptionWatch | None = None,
) -> Summary:
    """Train ``task`` with ``strategy``; ``recorder`` is rank 0's (None elsewhere).

    ``resume``: continue from that checkpoint. ``preemption``: stop when it says all ranks
    agree, after a checkpoint, by raising ``Preempted``. Checkpoints are written after every
    epoch and every ``--checkpoint-every`` steps.
    """
    device = ctx.device
    configure_reproducibility(config.seed, config.deterministic, device, os.environ)
    train_set, eval_set = task.load()
    startup.mark("data")
    shard = TrainShard(
        len(train_set), config.per_rank_batch(ctx.world_size), ctx.rank, ctx.world_size
    )
    if shard.steps_per_epoch == 0:
        raise DataError(
            f"{len(train_set)} training samples do not fill one global batch of "
            f"{shard.global_batch} ({shard.per_rank} per rank x {ctx.world_size} ranks)",
            hint="lower --batch-size / --global-batch-size, or raise --train-samples",
        )
    total_steps = config.epochs * shard.steps_per_epoch
    if config.max_steps:
        total_steps = min(total_steps, config.max_steps)

    dropout = DropoutContext(config.seed)
    model = task.build_model(dropout)
    optimizer = task.make_optimizer(model)
    wrapped = strategy.wrap(model, optimizer)
    scheduler = epoch_schedule(config, optimizer)
    checkpoints = Checkpointer(config, ctx, strategy, scheduler, recorder)
    start = checkpoints.restore(resume)
    startup.mark("model")

    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.precision)

    def autocast() -> contextlib.AbstractContextManager[Any]:
        if half is not None:
            return torch.autocast(device.type, dtype=half)
        return contextlib.nullcontext()

    if recorder is not None:
        recorder.begin(total_steps)
    clock = _Clock(start.elapsed_s, start.excluded_s, start.step * shard.global_batch)
    # ``done``: steps done in ``epoch``; ``epoch_done``: its evaluation too.
    step, epoch, done, epoch_done = start.step, start.epoch, start.index, start.epoch_done
    warm_until = step + config.warmup_steps
    first_step = step + 1
    process_started = startup.process_start_time()
    local_sum = torch.zeros((), dtype=torch.float64, device=device)
    # A resumed run that trains no further step reports the checkpoint's last loss.
    logged: tuple[int, float] | None = (step, start.last_loss) if step else None
    eval_loss, eval_accuracy = start.eval_loss, start.eval_accuracy

    def last_loss() -> float:
        """The global mean loss of the latest step: an all-reduce unless it was logged."""
        latest = logged
        if latest is not None and latest[0] == step:
            return latest[1]
        return _global_mean(local_sum, shard.global_batch)

    def save(reason: str) -> Path:
        with clock.excluded():
            state = LoopState(
                step, epoch, done, epoch_done, last_loss(), eval_loss, eval_accuracy,
                clock.elapsed(), clock.excluded_s,
            )  # fmt: skip
            return checkpoints.save(state, reason)

    while not (epoch_done and step >= total_steps):
        if epoch_done:
            epoch, done, epoch_done = epoch + 1, 0, False
        wrapped.train()
        order = epoch_order(len(train_set), config.seed, epoch).to(device)
        stop = min(shard.steps_per_epoch, done + total_steps - step)
        while done < stop:
            if step == warm_until:
                # Throughput after warm-up (allocator growth, cuDNN autotuning) is counted
                # from here: the one host synchronisation outside log points.
                _synchronize(device)
                clock.start_steady(step * shard.global_batch)
            inputs, targets = train_set.batch(shard.rows(order, done))
            step, done = step + 1, done + 1
            dropout.position = BatchPosition(step, shard.offset, shard.global_batch)
            with autocast():
                output = wrapped(inputs)
            losses = task.loss(output, targets)
            strategy.backward(losses.mean())
            strategy.step()
            strategy.zero_grad()
            local_sum = losses.detach().double().sum()
            if step == first_step:
                _synchronize(device)  # once: the first step's end, not its launch
                startup.mark("first_step")
                if recorder is not None:
                    recorder.startup(startup.startup_report(startup.marks(), process_started))
            if step % config.log_every == 0:
                logged = (step, _global_mean(local_sum, shard.global_batch))
                rate = clock.samples_per_s(step * shard.global_batch)
                if recorder is not None:
                    extra = task.throughput(rate, ctx.world_size)
                    recorder.train(epoch, step, logged[1], rate, clock.elapsed(), extra=extra)
            if recorder is not None:
                recorder.step(step, epoch)
            if checkpoints.due(step):
                save("interval")
            if preemption is not None and preemption.agreed(step, device, done == stop):
                raise Preempted(preemption.received or "a signal", step, save("preempted"))

        _synchronize(device)
        with clock.excluded():
            eval_loss, eval_accuracy = evaluate(wrapped, task, eval_set, ctx, autocast)
            if recorder is not None:
                recorder.eval(epoch, eval_loss, eval_accuracy)
            scheduler.step()
        epoch_done = True
        save("epoch")

    final_loss = last_loss()
    steady = clock.steady_samples_per_s(step * shard.global_batch)
    return Summary(
        steps=step,
        epochs=epoch,
        final_loss=final_loss,
        eval_loss=eval_loss,
        eval_accuracy=eval_accuracy,
        elapsed_s=clock.elapsed(),
        samples_per_s=clock.overall_samples_per_s(step * shard.global_batch),
        world_size=ctx.world_size,
        global_batch_size=shard.global_batch,
        steps_per_epoch=shard.steps_per_epoch,
        steady_samples_per_s=steady,
        throughput={} if steady is None else task.throughput(steady, ctx.world_size),
    )


class _Clock:
    """Wall time since training started, and training throughput with evaluation time left
    out. Read only at host synchronisation points (log points, epoch ends), where the
    device has caught up with the queued work."""

    def __init__(self, elapsed_s: float = 0.0, excluded_s: float = 0.0, samples: int = 0) -> None:
        """``elapsed_s``, ``excluded_s`` and ``samples``: what a resumed run had done."""
        now = time.perf_counter()
        self.started = now - elapsed_s
        self.excluded_s = excluded_s
        self._mark_time, self._mark_samples = now, samples
        self._steady: tuple[float, float, int] | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def samples_per_s(self, samples: int) -> float:
        """Throughput since the previous call, ``samples`` counting from the start."""
        now = time.perf_counter()
        rate = (samples - self._mark_samples) / max(now - self._mark_time, 1e-9)
        self._mark_time, self._mark_samples = now, samples
        return rate

    def overall_samples_per_s(self, samples: int) -> float:
        return samples / max(self.elapsed() - self.excluded_s, 1e-9)

    def start_steady(self, samples: int) -> None:
        """Warm-up ends here, ``samples`` counting from the start."""
        self._steady = (time.perf_counter(), self.excluded_s, samples)

    def steady_samples_per_s(self, samples: int) -> float | None:
        """Throughput since ``start_steady``; None before it or with no step since."""
        if self._steady is None or samples == self._steady[2]:
            return None
        began, excluded_before, counted = self._steady
        spent = time.perf_counter() - began - (self.excluded_s - excluded_before)
        return (samples - counted) / max(spent, 1e-9)

    @contextlib.contextmanager
    def excluded(self) -> Iterator[None]:
        begin = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - begin
            self.excluded_s += spent
            self._mark_time += spent


def evaluate(
    model: nn.Module,
    task: Task,
    eval_set: Dataset,
    ctx: DistContext,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]],
) -> tuple[float, float]:
    """Mean loss and accuracy over the whole evaluation set, each rank doing its shard."""
    model.eval()
    shard = EvalShard(len(eval_set), task.eval_batch_size, ctx.rank, ctx.world_size)
    totals = torch.zeros(2, dtype=torch.float64, device=ctx.device)
    with torch.no_grad():
        for rows in shard.batches():
            inputs, targets = eval_set.batch(slice(rows.start, rows.stop))
            with autocast():
                output = model(inputs)
            totals[0] += task.loss(output, targets).double().sum()
            totals[1] += task.correct(output, targets)
    dist.all_reduce(totals)
    loss_sum, correct = totals.tolist()
    return loss_sum / len(eval_set), correct / len(eval_set)


def _global_mean(local_sum: torch.Tensor, global_batch: int) -> float:
    total = local_sum.clone()
    dist.all_reduce(total)
    return float(total.item()) / global_batch


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
