"""``--profile FIRST-LAST`` and ``--memory-snapshot``: ``torch.profiler`` over those
optimizer steps on every rank, written under ``--out/profile/rank_N``.

The trace is written by ``torch.profiler.tensorboard_trace_handler``: a Chrome trace
(``rank_N.<ns>.pt.trace.json``; chrome://tracing, ui.perfetto.dev) in the directory layout
TensorBoard's profiler plugin reads (``tensorboard --logdir OUT/profile``). One warm-up
step before FIRST is profiled and thrown away (the profiler's own start-up cost would
otherwise land in step FIRST), as ``torch.profiler.schedule``'s ``warmup`` does.

The loop's phases (data, forward, backward, optimizer, collective, checkpoint, eval: the
ones it already tells the stall watch) appear in the trace as ``ddpimg/<phase>`` ranges
(``record_function``), from which ``ddpimg plot`` draws the step-time breakdown
(``ddpimg.trace_breakdown``).

``--memory-snapshot`` (CUDA only) records the caching allocator's history over the same
steps and dumps it as ``memory_snapshot.pickle`` for https://pytorch.org/memory_viz
(``torch.cuda.memory._record_memory_history`` / ``_dump_snapshot``, PyTorch's "Understanding
CUDA Memory Usage").

Importing this module does not import torch (``parse_profile_steps`` is used by the flags).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpimg.errors import DdpimgError
from ddpimg.runtime.stall.record import DATA
from ddpimg.runtime.stall.watch import RankProgress
from ddpimg.trace_breakdown import PROFILE_DIR, RANGE_PREFIX

if TYPE_CHECKING:
    import torch

MEMORY_SNAPSHOT = "memory_snapshot.pickle"
# Allocator events kept for the snapshot (PyTorch's example uses 100,000).
MEMORY_EVENTS = 100_000
_STEPS = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?\Z")


def parse_profile_steps(text: str) -> tuple[int, int]:
    """``FIRST-LAST`` (or ``STEP``) as (first, last), optimizer steps counted from 1."""
    match = _STEPS.match(text)
    if match is None:
        raise DdpimgError(
            f"--profile {text!r} is not a step range",
            hint="FIRST-LAST, e.g. --profile 20-25, or one step: --profile 20",
        )
    first = int(match[1])
    last = int(match[2]) if match[2] else first
    return first, last


def profile_window(steps: tuple[int, int], total_steps: int) -> tuple[int, int] | None:
    """The steps of ``--profile`` that a run of ``total_steps`` trains (a window past its
    end is cut there: the loop's last request for data, which ends the run, is no step);
    None when it trains none of them."""
    first, last = steps
    return None if first > total_steps else (first, min(last, total_steps))


def rank_directory(out: Path, rank: int) -> Path:
    return out / PROFILE_DIR / f"rank_{rank}"


class StepProfiler:
    """The profiler of one rank. ``progress(inner)`` gives the progress the loop reports
    its phases to; it drives the profiler from them: the data phase of step ``s`` starts
    step ``s``. ``close()`` at the end of the run writes what is still open."""

    def __init__(
        self, steps: tuple[int, int], out: Path, rank: int, device: torch.device, memory: bool
    ) -> None:
        self.first, self.last = steps
        self.directory = rank_directory(out, rank)
        self.rank, self.device, self.memory = rank, device, memory
        self.warmup = 1 if self.first > 1 else 0
        self._profiler: Any = None
        self._done = False

    def progress(self, inner: RankProgress) -> RankProgress:
        return _PhaseRanges(inner, self)

    def data(self, step: int) -> None:
        """Step ``step`` begins (its data phase)."""
        if self._done:
            return
        if self._profiler is None:
            if self.first - self.warmup <= step <= self.last:
                self._start(warmup=self.warmup if step < self.first else 0, steps=step)
            return
        self._profiler.step()
        if step > self.last:
            self.close()

    def _start(self, warmup: int, steps: int) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        activities = [ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        active = self.last - max(steps + warmup, self.first) + 1
        self._profiler = profile(
            activities=activities,
            schedule=schedule(wait=0, warmup=warmup, active=active, repeat=1),
            on_trace_ready=tensorboard_trace_handler(
                str(self.directory), worker_name=f"rank_{self.rank}"
            ),
        )
        if self.memory:
            torch.cuda.memory._record_memory_history(max_entries=MEMORY_EVENTS)
        self._profiler.start()

    def close(self) -> None:
        """Stop profiling (writing the trace of the steps recorded) and dump the memory
        snapshot."""
        if self._profiler is None or self._done:
            self._done = True
            return
        self._done = True
        self._profiler.stop()
        if self.memory:
            import torch

            self.directory.mkdir(parents=True, exist_ok=True)
            torch.cuda.memory._dump_snapshot(str(self.directory / MEMORY_SNAPSHOT))  # type: ignore[no-untyped-call]
            torch.cuda.memory._record_memory_history(enabled=None)


class _PhaseRanges(RankProgress):
    """A RankProgress that passes everything on to the stall watch's one and marks each
    phase as a ``ddpimg/<phase>`` range in the profiler's trace."""

    __slots__ = ("_inner", "_profiler", "_range")

    def __init__(self, inner: RankProgress, profiler: StepProfiler) -> None:
        super().__init__()
        self._inner, self._profiler = inner, profiler
        self._range: Any = None

    def saved(self, path: str, step: int) -> None:
        self._inner.saved(path, step)

    @property
    def checkpoint(self) -> tuple[str, int] | None:
        return self._inner.checkpoint

    def enter(self, phase: str, step: int) -> None:
        from torch.autograd.profiler import record_function

        self._inner.enter(phase, step)
        if self._range is not None:
            self._range.__exit__(None, None, None)
        if phase == DATA:
            self._profiler.data(step)
        self._range = record_function(RANGE_PREFIX + phase)
        self._range.__enter__()

    def touch(self) -> None:
        self._inner.touch()
