"""The training loop, written once for every trainer and strategy: a ``Trainer`` object
that owns the run's state (model, optimizer, schedule, checkpoints, the data position) and
takes it forward step by step.

Per step: this rank's slice of the global batch (``BatchPlan``: the rows follow from (seed,
epoch, step) alone), in one forward pass or in micro-batches (``--micro-batch-size``): for
each, forward (with GlobalBatchDropout told where the micro-batch sits in the global batch)
and backward of its share of the mean loss (its per-sample losses summed over the rank's
samples of the step), the gradients accumulated and averaged over the ranks with the last
one's backward (ZeRO-2/3 reduce each one's into their partitions as it comes); then the
optimizer step through the strategy. So the gradient is that of the mean over the global
batch however it is split over ranks and micro-batches. The loss
that is reported is that mean: the ranks' sums of per-sample losses, all-reduced, over the
global batch size. That reduction, and with it the only host synchronisation of the step,
happens at log points only.

After each epoch: a sharded evaluation whose loss and correct-prediction sums are
all-reduced, so the mean loss and accuracy are those of the whole evaluation set; then the
learning-rate schedule steps and a checkpoint is written.

``--max-steps`` stops the run at that step. When it falls inside an epoch, the checkpoint
written there keeps the position inside that epoch (its evaluation and schedule step are
still to come), and then the current model is evaluated and reported: a later run with a
larger ``--max-steps`` continues exactly where this one stopped, as if never interrupted.
A run that stops inside its first epoch (a smoke run, ``--max-steps 1``) evaluates at most
``SHORT_RUN_EVAL_SAMPLES`` samples spread over the set unless ``--eval-samples`` says
otherwise (``TrainConfig.eval_count``); its eval line and record say how many of how many.

Checkpoints (``ddpimg.train.checkpoint``): after every epoch, every ``--checkpoint-every``
steps, at a ``--max-steps`` stop and when the ranks agree on a preemption signal (then
``Preempted`` is raised). A resumed run starts at the checkpoint's position and loads only
the batches from there on: the data position is (epoch, step in the epoch), from which
every rank computes its rows directly.

Progress: the loop tells ``progress`` (``ddpimg.runtime.stall``) which phase of which step
it enters (data, forward, backward, optimizer, collective, checkpoint, eval) and which
checkpoint is the last valid one. It is an assignment in memory; the stall watch publishes
it from a thread of its own, so that when a rank stops, the others can say which, where
it was and since when.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ddpimg.errors import DataError
from ddpimg.runtime.stall.record import (
    BACKWARD,
    CHECKPOINT,
    COLLECTIVE,
    DATA,
    EVAL,
    FORWARD,
    OPTIMIZER,
)
from ddpimg.runtime.stall.watch import RankProgress
from ddpimg.train import startup
from ddpimg.train.checkpoint.saver import Checkpointer
from ddpimg.train.checkpoint.state import LoopState
from ddpimg.train.compiling import DEFAULT_BACKEND, CompileClock
from ddpimg.train.dropout import BatchPosition, DropoutContext
from ddpimg.train.preempted import Preempted
from ddpimg.train.profiling import StepProfiler, profile_window
from ddpimg.train.seeding import configure_reproducibility
from ddpimg.train.sharding import EvalShard, TrainShard, epoch_order
from ddpimg.train.strategies.base import half_dtype
from ddpimg.train.tasks import epoch_schedule

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.checkpoint import Resume
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.outputs import RunRecorder
    from ddpimg.train.preemption import PreemptionWatch
    from ddpimg.train.strategies.base import Strategy
    from ddpimg.train.tasks.base import Task

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Summary:
    """The totals of a run (the ``summary`` line of metrics.jsonl). ``elapsed_s`` is the
    wall time of the loop, evaluations included; ``samples_per_s`` counts training time
    only; ``steady_samples_per_s`` also leaves out the first ``--warmup-steps`` steps (None
    when the run was not longer), and ``throughput`` holds the task's rates derived from it
    (images/s, tokens/s, MFU), written as fields of their own. ``micro_batch_size``: samples
    per rank and forward pass, ``accumulation_steps`` of them per rank and step.
    ``skipped_samples``: samples replaced because they could not be read, over all ranks
    (``--bad-samples skip``). ``compile_s``: with ``--compile``, rank 0's seconds spent
    compiling (training and evaluation), which no rate counts; absent from the record
    without it."""

    steps: int
    epochs: int
    final_loss: float
    eval_loss: float
    eval_accuracy: float
    elapsed_s: float
    samples_per_s: float
    world_size: int
    global_batch_size: int
    micro_batch_size: int
    accumulation_steps: int
    steps_per_epoch: int
    steady_samples_per_s: float | None = None
    skipped_samples: int = 0
    throughput: dict[str, float | None] = field(default_factory=dict)
    compile_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        del record["throughput"]
        if self.compile_s is None:
            del record["compile_s"]
        return record | self.throughput


class Trainer:
    """One run: ``Trainer(...).run()`` trains ``task`` with ``strategy``, ``batch`` samples
    a step, from the start or from ``resume``. ``recorder`` is rank 0's (None elsewhere);
    ``preemption`` stops the run after a checkpoint (``Preempted``) once all ranks agree on
    a signal; ``progress`` is where the loop records its phase for the stall watch (a
    private one when none is given)."""

    def __init__(
        self,
        config: TrainConfig,
        ctx: DistContext,
        task: Task,
        strategy: Strategy,
        recorder: RunRecorder | None,
        *,
        batch: BatchLayout,
        resume: Resume | None = None,
        preemption: PreemptionWatch | None = None,
        progress: RankProgress | None = None,
    ) -> None:
        self.config, self.ctx, self.batch = config, ctx, batch
        self.task, self.strategy = task, strategy
        self.recorder, self.preemption = recorder, preemption
        self.progress = RankProgress() if progress is None else progress
        configure_reproducibility(config.seed, config.deterministic, ctx.device, os.environ)
        self.train_set, self.eval_set = task.datasets()
        if recorder is not None:
            recorder.manifest["data"] = task.data_facts()
        startup.mark("data")
        self.shard = TrainShard(len(self.train_set), batch, ctx.rank)
        if self.shard.steps_per_epoch == 0:
            raise DataError(
                f"{len(self.train_set)} training samples do not fill one global batch of "
                f"{batch.global_size} ({batch.per_rank} per rank x {batch.world_size} ranks)",
                hint="lower --batch-size / --global-batch-size, or raise --train-samples",
            )
        self.total_steps = config.epochs * self.shard.steps_per_epoch
        if config.max_steps:
            self.total_steps = min(self.total_steps, config.max_steps)
        short = self.total_steps < self.shard.steps_per_epoch
        self.eval_samples = config.eval_count(len(self.eval_set), short=short)
        self.profiler = self._profiler()

        self.dropout = DropoutContext(config.seed)
        self.model = strategy.wrap(task.build_model(self.dropout), task.make_optimizer)
        self.scheduler = epoch_schedule(config, strategy.optimizer)
        self.checkpoints = Checkpointer(
            config, ctx, strategy, self.scheduler, recorder,
            batch=batch, task_facts=task.fingerprint(),
        )  # fmt: skip
        start = self.checkpoints.restore(resume)
        if resume is not None:
            self.progress.saved(str(resume.path), start.step)
        # Compiling is lazy: this only marks the module; the first steps compile.
        self.compiling = CompileClock() if config.compile else None
        if config.compile:
            self.dropout.keep_outside_graphs()
            strategy.compile(config.compile_backend or DEFAULT_BACKEND)
        startup.mark("model")

        self._half = half_dtype(config.precision)
        # The position: ``index`` steps done in ``epoch``; ``epoch_done``: its evaluation and
        # schedule step too. With the seed it decides every rank's next rows.
        self.step, self.epoch, self.index = start.step, start.epoch, start.index
        self.epoch_done = start.epoch_done
        self.eval_loss, self.eval_accuracy = start.eval_loss, start.eval_accuracy
        self.clock = _Clock(start.elapsed_s, start.excluded_s, start.step * self.batch.global_size)
        self._warm_until = self.step + config.warmup_steps
        self._first_step = self.step + 1
        self._local_sum = torch.zeros((), dtype=torch.float64, device=ctx.device)
        # A resumed run that trains no further step reports the checkpoint's last loss.
        self._logged: tuple[int, float] | None = (self.step, start.last_loss) if self.step else None

    def _profiler(self) -> StepProfiler | None:
        """``--profile``'s profiler over the steps this run trains; the loop's progress
        then also marks its phases in the trace."""
        config = self.config
        if config.profile_steps is None:
            return None
        window = profile_window(config.profile_steps, self.total_steps)
        if window is None:
            if self.recorder is not None:
                first, last = config.profile_steps
                print(
                    f"ddpimg: warning: --profile {first}-{last}: the run trains "
                    f"{self.total_steps} steps; nothing is profiled",
                    file=sys.stderr,
                    flush=True,
                )
            return None
        ctx = self.ctx
        profiler = StepProfiler(window, config.out, ctx.rank, ctx.device, config.memory_snapshot)
        self.progress = profiler.progress(self.progress)
        return profiler

    def run(self) -> Summary:
        """Train to ``--epochs`` / ``--max-steps``; the summary of the whole run."""
        if self.recorder is not None:
            self.recorder.begin(self.total_steps)
        with contextlib.ExitStack() as stack:
            if self.profiler is not None:
                stack.callback(self.profiler.close)
            if self.compiling is not None:
                self.compiling.open()
                stack.callback(self.compiling.close)
            while not (self.epoch_done and self.step >= self.total_steps):
                if self.epoch_done:
                    self.epoch, self.index, self.epoch_done = self.epoch + 1, 0, False
                stop = min(self.shard.steps_per_epoch, self.index + self.total_steps - self.step)
                self.train_epoch(stop)
                if self.index < self.shard.steps_per_epoch:
                    self.stop_inside_epoch()
                    break
                self.end_epoch()
        return self.summary()

    def train_epoch(self, stop: int) -> None:
        """Train the current epoch from step ``index`` up to step ``stop`` of it."""
        self.model.train()
        order = epoch_order(len(self.train_set), self.config.seed, self.epoch)
        batches = self.train_set.batches(self.shard.plan(order, self.epoch, self.index, stop))
        with contextlib.closing(batches):
            micro_batches = iter(batches)
            while self.index < stop:
                self.train_step(micro_batches)
                self.after_step(epoch_end=self.index == stop)

    def _fetched(self, micro_batches: Iterator[Batch]) -> Batch:
        """The next micro-batch, with the wait for it recorded as the step's data phase."""
        self.progress.enter(DATA, self.step)
        try:
            return next(micro_batches)
        except StopIteration:
            raise RuntimeError(
                f"the data ended inside step {self.step}: its plan holds fewer batches than "
                "the steps it was made for"
            ) from None

    def train_step(self, micro_batches: Iterator[Batch]) -> None:
        """One optimizer step on this rank's slice of the global batch, taken from
        ``micro_batches`` one forward pass at a time (``batch.accumulation`` of them)."""
        if self.step == self._warm_until:
            # Throughput after warm-up (allocator growth, cuDNN autotuning) is counted from
            # here: the one host synchronisation outside log points.
            _synchronize(self.ctx.device)
            self.clock.start_steady(self.step * self.batch.global_size)
        self.step, self.index = self.step + 1, self.index + 1
        first = self.step == self._first_step
        rng_before = _global_rng_state(self.ctx.device) if first else None
        progress = self.progress
        accumulation = self.batch.accumulation
        local_sum = torch.zeros((), dtype=torch.float64, device=self.ctx.device)
        for micro_step in range(accumulation):
            inputs, targets = self._fetched(micro_batches)
            offset = self.shard.micro_offset(micro_step)
            self.dropout.position = BatchPosition(self.step, offset, self.batch.global_size)
            with self.strategy.micro_batch(last=micro_step == accumulation - 1):
                progress.enter(FORWARD, self.step)
                with self.autocast():
                    output = self.model(inputs)
                losses = self.task.loss(output, targets)
                progress.enter(BACKWARD, self.step)
                # This micro-batch's share of the mean over the rank's samples of the step:
                # the accumulated gradient is the mean's, as with the whole slice at once.
                share = losses.mean() if accumulation == 1 else losses.mean() / accumulation
                self.strategy.backward(share)
            local_sum += losses.detach().double().sum()
        progress.enter(OPTIMIZER, self.step)
        self.strategy.step()
        self.strategy.zero_grad()
        self._local_sum = local_sum
        if self.compiling is not None:
            self._leave_out_compiling(self.compiling, first)
        if first:
            _synchronize(self.ctx.device)  # once: the first step's end, not its launch
            startup.mark("first_step")
            self._warn_if_rank_random(rng_before)
            if self.recorder is not None:
                report = startup.startup_report(startup.marks(), startup.process_start_time())
                self.recorder.startup(report)

    def _leave_out_compiling(self, compiling: CompileClock, first: bool) -> None:
        """Leave the step's compile time (none once every shape has compiled) out of the
        throughput; after the first step, say on stderr how long it took."""
        spent = compiling.take()
        self.clock.leave_out(spent)
        if first and self.recorder is not None:
            print(f"ddpimg: compiled the model in {spent:.1f} s", file=sys.stderr, flush=True)

    def after_step(self, *, epoch_end: bool) -> None:
        """Logging, periodic checkpoints and the preemption check after a step;
        ``epoch_end``: it was the last step this epoch trains."""
        config, recorder = self.config, self.recorder
        self.progress.enter(COLLECTIVE, self.step)
        if self.step % config.log_every == 0:
            self._logged = (self.step, _global_mean(self._local_sum, self.batch.global_size))
            rate = self.clock.samples_per_s(self.step * self.batch.global_size)
            if recorder is not None:
                extra = self.task.throughput(rate, self.ctx.world_size)
                recorder.train(
                    self.epoch, self.step, self._logged[1], rate, self.clock.elapsed(),
                    lr=float(self.scheduler.get_last_lr()[0]), extra=extra,
                )  # fmt: skip
        if recorder is not None:
            recorder.step(self.step, self.epoch)
        if self.checkpoints.due(self.step):
            self.save("interval")
            self.progress.enter(COLLECTIVE, self.step)
        preemption = self.preemption
        if preemption is not None and preemption.agreed(self.step, self.ctx.device, epoch_end):
            raise Preempted(preemption.received or "a signal", self.step, self.save("preempted"))

    def end_epoch(self) -> None:
        """The epoch's evaluation, schedule step and checkpoint."""
        _synchronize(self.ctx.device)
        with self.clock.excluded():
            self.evaluate_and_report()
            self.scheduler.step()
        self.epoch_done = True
        self.save("epoch")

    def stop_inside_epoch(self) -> None:
        """``--max-steps`` ended the run inside an epoch: checkpoint the position as it is
        (the epoch still to finish), then evaluate the model trained so far."""
        self.save("max_steps")
        _synchronize(self.ctx.device)
        with self.clock.excluded():
            self.evaluate_and_report()

    def evaluate_and_report(self) -> None:
        self.eval_loss, self.eval_accuracy = self.evaluate()
        if self.compiling is not None:
            # Evaluation is left out of the throughput already, its compiling with it.
            self.compiling.take()
        if self.recorder is not None:
            self.recorder.eval(
                self.epoch, self.eval_loss, self.eval_accuracy, samples=self.eval_samples,
                set_samples=len(self.eval_set), step=self.step,
            )  # fmt: skip

    def evaluate(self) -> tuple[float, float]:
        """Mean loss and accuracy over the ``eval_samples`` evaluated (the whole set, or a
        short run's part of it), each rank doing its shard; the samples evaluated are
        counted too, and must be those, each once."""
        self.model.eval()
        progress = self.progress
        progress.enter(EVAL, self.step)
        ctx = self.ctx
        size = self.eval_samples
        shard = EvalShard(
            size, self.task.eval_batch_size, ctx.rank, ctx.world_size, len(self.eval_set)
        )
        totals = torch.zeros(3, dtype=torch.float64, device=ctx.device)
        batches = self.eval_set.batches(shard.plan())
        with torch.no_grad(), contextlib.closing(batches):
            for inputs, targets in batches:
                with self.autocast():
                    output = self.model(inputs)
                totals[0] += self.task.loss(output, targets).double().sum()
                totals[1] += self.task.correct(output, targets)
                totals[2] += len(targets)
                progress.touch()
        progress.enter(COLLECTIVE, self.step)
        dist.all_reduce(totals)
        loss_sum, correct, counted = totals.tolist()
        if counted != size:
            raise RuntimeError(f"the ranks evaluated {counted:.0f} samples, not {size}")
        return loss_sum / size, correct / size

    def save(self, reason: str) -> Path:
        """Checkpoint the current position (collective)."""
        self.progress.enter(CHECKPOINT, self.step)
        with self.clock.excluded():
            state = LoopState(
                self.step, self.epoch, self.index, self.epoch_done, self.last_loss(),
                self.eval_loss, self.eval_accuracy, self.clock.elapsed(), self.clock.excluded_s,
            )  # fmt: skip
            path = self.checkpoints.save(state, reason)
        self.progress.saved(str(path), self.step)
        return path

    def last_loss(self) -> float:
        """The global mean loss of the latest step: an all-reduce unless it was logged."""
        logged = self._logged
        if logged is not None and logged[0] == self.step:
            return logged[1]
        return _global_mean(self._local_sum, self.batch.global_size)

    def summary(self) -> Summary:
        """The run's totals (collective: the last loss and the skipped samples are reduced)."""
        self.progress.enter(COLLECTIVE, self.step)
        final_loss = self.last_loss()
        skipped = torch.tensor(
            self.train_set.skipped() + self.eval_set.skipped(), device=self.ctx.device
        )
        dist.all_reduce(skipped)
        samples = self.step * self.batch.global_size
        steady = self.clock.steady_samples_per_s(samples)
        return Summary(
            steps=self.step,
            epochs=self.epoch,
            final_loss=final_loss,
            eval_loss=self.eval_loss,
            eval_accuracy=self.eval_accuracy,
            elapsed_s=self.clock.elapsed(),
            samples_per_s=self.clock.overall_samples_per_s(samples),
            world_size=self.ctx.world_size,
            global_batch_size=self.batch.global_size,
            micro_batch_size=self.batch.micro,
            accumulation_steps=self.batch.accumulation,
            steps_per_epoch=self.shard.steps_per_epoch,
            steady_samples_per_s=steady,
            skipped_samples=int(skipped.item()),
            throughput={} if steady is None else self.task.throughput(steady, self.ctx.world_size),
            compile_s=None if self.compiling is None else round(self.compiling.total_s, 3),
        )

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self._half is not None:
            return torch.autocast(self.ctx.device.type, dtype=self._half)
        return contextlib.nullcontext()

    def _warn_if_rank_random(self, before: list[torch.Tensor] | None) -> None:
        """Warn (rank 0) when the first step drew from torch's global generators: a layer
        that does (e.g. a functional dropout) draws from each rank's own stream, so the loss
        trajectory then depends on the number of processes."""
        if before is None or self.recorder is None:
            return
        after = _global_rng_state(self.ctx.device)
        if all(torch.equal(a, b) for a, b in zip(before, after, strict=True)):
            return
        print(
            f"ddpimg: warning: the {self.config.trainer} model drew from torch's global random "
            "generator in a training step (a random layer ddpimg does not replace with a "
            "per-sample one): its loss trajectory depends on the number of processes",
            file=sys.stderr,
            flush=True,
        )
        self.recorder.manifest["rank_dependent_randomness"] = True


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

    def leave_out(self, spent_s: float) -> None:
        """Count ``spent_s`` seconds that just passed as outside training."""
        self.excluded_s += spent_s
        self._mark_time += spent_s

    @contextlib.contextmanager
    def excluded(self) -> Iterator[None]:
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.leave_out(time.perf_counter() - begin)


def _global_rng_state(device: torch.device) -> list[torch.Tensor]:
    """torch's global generator states that a training step could draw from."""
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


def _global_mean(local_sum: torch.Tensor, global_batch: int) -> float:
    total = local_sum.clone()
    dist.all_reduce(total)
    return float(total.item()) / global_batch


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
