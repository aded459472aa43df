"""Saving and restoring the checkpoints of one run; every method is collective (all ranks
call it at the same point of the loop).

A save: rank 0 prepares the staging folder; every rank has the strategy write its part
(``<strategy>/``) and writes its RNG states; rank 0 writes the loop position and the
scheduler; every rank fsyncs; then rank 0 writes the marker, publishes (rename) and prunes
to ``--keep-checkpoints``. Nothing is visible under the final name before it is complete.
"""

from __future__ import annotations

import json
import shutil
import sys
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
import torch.distributed as dist

from ddpimg.errors import DdpimgError
from ddpimg.fsio import fsync_tree
from ddpimg.train.checkpoint.files import (
    CHECKPOINTS,
    checkpoint_name,
    prune,
    publish,
    remove_leftovers,
    staging_name,
    write_marker,
)
from ddpimg.train.checkpoint.safeload import load_tensors
from ddpimg.train.checkpoint.state import (
    LOOP_JSON,
    LOOP_PT,
    RNG_DIR,
    CheckpointRecord,
    LoopState,
    capture_rng,
    fingerprint,
    restore_rng,
    rng_file,
    rng_mismatch,
)
from ddpimg.train.checkpoint.structure import mismatch, unusable
from ddpimg.train.outputs import utc_now

if TYPE_CHECKING:
    from collections.abc import Mapping

    from torch.distributed.checkpoint.api import CheckpointException

    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.checkpoint.resume import Resume
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.outputs import RunRecorder
    from ddpimg.train.strategies.base import Strategy


# What torch.save's zip writer says when a write fails (a RuntimeError without the errno;
# measured on a full tmpfs: the first two, then the third from its cleanup).
_TORCH_WRITE_FAILED = (
    "PytorchStreamWriter failed writing",
    "basic_ios::clear: iostream error",
    "unexpected pos",
)


def _dcp_exceptions() -> tuple[type[BaseException], ...]:
    """torch.distributed.checkpoint's CheckpointException once DCP is imported, else none.
    Only a run that imported DCP (FSDP's checkpoints) can raise one: asking through
    ``sys.modules`` spares every other run the package's import (0.7 s on two cores, DTensor
    with it)."""
    api = sys.modules.get("torch.distributed.checkpoint.api")
    return () if api is None else (api.CheckpointException,)


def _dcp_failure(err: BaseException | None) -> CheckpointException | None:
    """``err`` if it is DCP's CheckpointException."""
    return cast("CheckpointException", err) if isinstance(err, _dcp_exceptions()) else None


def _write_errors() -> tuple[type[BaseException], ...]:
    """What a checkpoint write that fails on the disk raises (``write_failure`` decides), at
    the time of asking."""
    return (OSError, RuntimeError, *_dcp_exceptions())


def write_failure(err: BaseException) -> str | None:
    """What failed, when ``err`` is a file write failing (a full disk, a quota): an OSError,
    torch.save's RuntimeError, or either inside a torch.distributed.checkpoint
    CheckpointException; None for anything else (a collective failing is not one)."""
    if isinstance(err, OSError):
        return f"{err.strerror}: {err.filename}" if err.filename else str(err)
    if isinstance(err, RuntimeError) and any(mark in str(err) for mark in _TORCH_WRITE_FAILED):
        return "torch.save could not write a file"
    dcp = _dcp_failure(err)
    if dcp is not None:
        found = (write_failure(inner) for inner, _ in dcp.failures.values())
        return next((cause for cause in found if cause is not None), None)
    return None


def _release_open_files(err: BaseException) -> None:
    """Let go of the files a failed write left open. torch.save's zip writer closes its file
    only when the writer is freed, and the frames of ``err``'s traceback (and of the
    exceptions chained to it) hold it: a removed file keeps its blocks until then, and the
    manifest written next would find the disk still full."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [err]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        pending += [current.__cause__, current.__context__]
        dcp = _dcp_failure(current)
        if dcp is not None:
            pending += [inner for inner, _ in dcp.failures.values()]


class Checkpointer:
    """The checkpoints of the run ``config`` in the world ``ctx``; ``recorder`` is rank 0's
    (None elsewhere), whose metrics.jsonl length each checkpoint records; ``batch`` is
    recorded with each (a resume on another world size keeps its global size), and so are
    ``task_facts`` (``Task.fingerprint``, in the fingerprint)."""

    def __init__(
        self,
        config: TrainConfig,
        ctx: DistContext,
        strategy: Strategy,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        recorder: RunRecorder | None,
        *,
        batch: BatchLayout,
        task_facts: Mapping[str, int],
    ) -> None:
        self.config = config
        self.task_facts = task_facts
        self.ctx = ctx
        self.batch = batch
        self.strategy = strategy
        self.scheduler = scheduler
        self.recorder = recorder
        self.root = config.out / CHECKPOINTS
        self._last: tuple[tuple[int, bool], Path] | None = None

    def due(self, step: int) -> bool:
        """Whether ``--checkpoint-every`` asks for a checkpoint after ``step``."""
        every = self.config.checkpoint_every
        return bool(every) and step % every == 0

    def restore(self, resume: Resume | None) -> LoopState:
        """Load ``resume`` into the wrapped model, optimizer and scheduler and this
        process's RNGs; returns where the loop continues (the start for None). With another
        world size, every rank takes rank 0's RNG states."""
        if resume is None:
            return LoopState()
        self.strategy.load(resume.path / self.strategy.name, resume.record.world_size)
        loop_state = load_tensors(resume.path / LOOP_PT)
        problem = mismatch(loop_state, {"scheduler": self.scheduler.state_dict()})
        if problem:
            raise unusable(resume.path / LOOP_PT, problem)
        self.scheduler.load_state_dict(loop_state["scheduler"])
        # A run resumed at the end of an epoch steps the scheduler before any optimizer step
        # of this process, rightly (those steps were taken before the checkpoint); torch
        # would warn that the schedule's first value gets skipped, which it does not here.
        warnings.filterwarnings(
            "ignore", message=r"Detected call of `lr_scheduler.step\(\)` before `optimizer.step"
        )
        same_world = resume.record.world_size == self.ctx.world_size
        rng_path = resume.path / rng_file(self.ctx.rank if same_world else 0)
        rng = load_tensors(rng_path)
        problem = rng_mismatch(rng)
        if problem:
            raise unusable(rng_path, problem)
        restore_rng(rng)
        loop = resume.record.loop
        self._last = ((loop.step, loop.epoch_done), resume.path)
        return loop

    def save(self, state: LoopState, reason: str) -> Path:
        """Write the checkpoint of ``state`` (``reason``: interval, epoch, max_steps, preempted) and
        return its directory; a second call for the same position returns the first's."""
        key = (state.step, state.epoch_done)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        staging = self.root / staging_name(state.step)
        final = self.root / checkpoint_name(state.step)
        try:
            self._write(state, reason, staging, final)
        except _write_errors() as err:  # evaluated after the write: DCP loaded by then
            cause = write_failure(err)
            if cause is None:
                raise
            # A full disk (or quota): what was staged goes, so that the space it took is
            # back and nothing half-written remains; the checkpoints before stay intact.
            _release_open_files(err)
            shutil.rmtree(staging, ignore_errors=True)
            free = shutil.disk_usage(self.root).free
            raise DdpimgError(
                f"checkpoint {final} could not be written ({cause}); its temporary folder "
                f"was removed, which left {free:,} bytes free on its file system; the "
                "earlier checkpoints are intact",
                hint="free space (or quota) on the file system of --out, or use another "
                "--out; then run the same command again: --resume auto continues from the "
                "last checkpoint",
            ) from err
        self._last = (key, final)
        return final

    def _write(self, state: LoopState, reason: str, staging: Path, final: Path) -> None:
        if self.ctx.is_main:
            self.root.mkdir(parents=True, exist_ok=True)
            remove_leftovers(self.root)
            (staging / self.strategy.name).mkdir(parents=True)
            (staging / RNG_DIR).mkdir()
        dist.barrier()
        self.strategy.save(staging / self.strategy.name)
        torch.save(capture_rng(), staging / rng_file(self.ctx.rank))
        if self.ctx.is_main:
            torch.save({"scheduler": self.scheduler.state_dict()}, staging / LOOP_PT)
            record = CheckpointRecord(
                loop=state,
                world_size=self.batch.world_size,
                global_batch=self.batch.global_size,
                strategy=self.strategy.name,
                fingerprint=fingerprint(self.config, self.batch, self.task_facts),
                metrics_lines=self.recorder.sync_metrics() if self.recorder else 0,
                reason=reason,
                saved_utc=utc_now(),
            )
            text = json.dumps(record.to_json(), indent=1, sort_keys=True)
            (staging / LOOP_JSON).write_text(text + "\n", encoding="utf-8")
        dist.barrier()
        # Every rank flushes: on a shared filesystem only the writer's node can.
        fsync_tree(staging)
        dist.barrier()
        if self.ctx.is_main:
            write_marker(staging, state.step)
            publish(staging, final)
            prune(self.root, self.config.keep_checkpoints, state.step)
