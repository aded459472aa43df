"""The state of one script run in its own process: where the script is (optimizer steps,
evaluation, checkpoints), whether it was asked to stop, what it logged. The boot makes one
``ScriptRuntime``; the optimizer hooks, the framework callbacks and the public API
(``import ddpimg``) act on it through ``current()``.

Preemption, as for the bundled trainers: the signals only set a flag, and the ranks agree
at a step boundary (an all-reduce every ``--preempt-check-every`` steps) before the
framework writes its checkpoint, because saving is collective. What acts on the flag is a
*consumer*: ddpimg's Hugging Face or Lightning callback while a ``Trainer`` trains, or a
script that calls ``ddpimg.preemption_requested()``. With none, nothing would ever save, so
the signal ends the script at once (``ScriptPreempted`` raised in the main thread, as
Ctrl-C raises KeyboardInterrupt) with exit status 75: a requeued job then starts again from
whatever checkpoints the script keeps itself.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from ddpimg.runtime.stall.record import EVAL, OPTIMIZER, TRAIN
from ddpimg.runtime.stall.watch import RankProgress
from ddpimg.script.options import RESUME_AUTO, RESUME_NONE, ScriptOptions
from ddpimg.train.outputs import utc_now
from ddpimg.train.preemption import PreemptionWatch

if TYPE_CHECKING:
    import torch

    from ddpimg.runtime.stall import StallWatch
    from ddpimg.script.record import ScriptRecord

Kind = Literal["train", "eval"]
# How often rank 0 records its progress in manifest.json (``record_progress``).
PROGRESS_EVERY_S = 5.0


class ScriptPreempted(BaseException):
    """Ends the script after a preemption signal: raised by ddpimg's framework callbacks
    once every rank has written its part of the checkpoint (``checkpoint``: its path), or
    by the signal handler when nothing in the script acts on preemption (``checkpoint``
    None). A BaseException, as KeyboardInterrupt is, so that the script's own ``except
    Exception`` does not swallow it."""

    def __init__(self, cause: str, step: int, checkpoint: str | None) -> None:
        where = f"checkpoint {checkpoint}" if checkpoint else "no checkpoint of ddpimg's"
        super().__init__(f"{cause}: stopped after step {step}, {where}")
        self.cause = cause
        self.step = step
        self.checkpoint = checkpoint


class _Signals(PreemptionWatch):
    """The preemption flag, escalated to ``ScriptPreempted`` when no consumer listens while
    the script runs. Before it runs (the boot's rendezvous and decisions) the flag alone is
    set: the boot's waits look at it and end with ``StartStopped`` (one line, status 75),
    never with an exception out of the middle of its own code."""

    def __init__(self, runtime: ScriptRuntime, signals: Iterable[str], check_every: int) -> None:
        super().__init__(signals, check_every)
        self._runtime = runtime

    def _record(self, signum: int, frame: FrameType | None) -> None:
        first = self.received is None
        super()._record(signum, frame)
        if first and self._runtime.script_running and not self._runtime.consumers:
            raise ScriptPreempted(str(self.received), self._runtime.steps, None)


class ScriptRuntime:
    """See the module docstring. ``record`` is rank 0's (None elsewhere or with
    ``--no-record``); ``watch`` None without a stall watch; ``continuing``: this run
    continues one in ``--out`` that did not complete (the same answer on every rank). The
    boot sets them as it learns them, before the script runs."""

    def __init__(self, options: ScriptOptions, *, rank: int, world_size: int) -> None:
        self.options = options
        self.rank = rank
        self.world_size = world_size
        self.continuing = False
        self.record: ScriptRecord | None = None
        self.watch: StallWatch | None = None
        self.progress = RankProgress()
        self.preemption = _Signals(self, options.preempt_signals, options.preempt_check_every)
        self.consumers: set[str] = set()
        self.script_running = False  # set by the boot as the script's first line runs
        self.steps = 0  # optimizer steps this process has taken (or a framework's count)
        self.counted_by_framework = False  # ``steps`` is a framework's own count
        self._progress_at = float("-inf")
        self.started = time.monotonic()
        self.last_loss: float | None = None
        self.summary: dict[str, Any] = {}
        self._api_checks = 0

    def attach_watch(self, watch: StallWatch) -> None:
        """Report progress to ``watch`` (before the script runs: nothing is lost)."""
        self.watch = watch
        self.progress = watch.progress

    # -- progress ----------------------------------------------------------------------------

    def optimizer_step_begins(self) -> None:
        self.progress.enter(OPTIMIZER, self.steps)

    def optimizer_step_ended(self) -> None:
        self.steps += 1
        self.progress.enter(TRAIN, self.steps)
        self.record_progress()

    def at_step(self, step: int) -> None:
        """A framework's own count of optimizer steps (it knows about accumulation and
        resumed runs better than the hooks)."""
        self.steps = step
        self.counted_by_framework = True

    def record_progress(self, final: bool = False) -> None:
        """Rank 0's manifest.json says how far the script is (``progress``: optimizer steps
        and the time it took), at most every PROGRESS_EVERY_S: what ``ddpimg follow`` shows
        of a script that logs nothing. The hooks' count of a plain script starts again in a
        continued run, so the steps of the runs it continues are added; a framework's count
        already holds them."""
        now = time.monotonic()
        if self.record is None or (not final and now - self._progress_at < PROGRESS_EVERY_S):
            return
        self._progress_at = now
        earlier = 0
        if not self.counted_by_framework:
            continued = self.record.manifest.get("continues") or {}
            before = (continued.get("progress") or {}).get("steps")
            earlier = before if isinstance(before, int) and not isinstance(before, bool) else 0
        self.record.update(
            progress={
                "steps": earlier + self.steps,
                "run_steps": self.steps,
                "elapsed_s": round(now - self.started, 3),
                "utc": utc_now(),
            }
        )

    def report_progress(self, step: int | None = None) -> None:
        """``ddpimg.progress``: the script is alive and moving (a loop without an optimizer
        step, a long evaluation)."""
        if step is not None:
            self.steps = step
            self.counted_by_framework = True  # the script's own count
        self.progress.enter(TRAIN, self.steps)
        self.record_progress()

    def evaluating(self) -> None:
        """An evaluation batch: the first one enters the eval phase, the others keep it."""
        if self.progress.position[2] == EVAL:
            self.progress.touch()
        else:
            self.progress.enter(EVAL, self.steps)

    def evaluated(self) -> None:
        self.progress.enter(TRAIN, self.steps)

    def checkpoint_saved(self, path: str, step: int) -> None:
        """A framework wrote a checkpoint: named by the stall watch, kept in the manifest."""
        self.progress.saved(path, step)
        if self.record is not None:
            self.record.update(last_checkpoint={"path": path, "step": step, "utc": utc_now()})

    def output_directory(self, framework: str, path: str) -> None:
        if self.record is not None:
            self.record.update(outputs=self.record.manifest["outputs"] | {framework: path})

    # -- preemption --------------------------------------------------------------------------

    def begin_script(self) -> None:
        """The script starts: from now on a preemption signal that no consumer acts on ends
        it at once; one that arrived during the boot ends it before its first line."""
        self.script_running = True
        if self.preemption.received is not None and not self.consumers:
            raise ScriptPreempted(self.preemption.received, self.steps, None)

    def acting(self, consumer: str, active: bool = True) -> None:
        """``consumer`` starts (or stops) acting on preemption; a signal that arrived while
        nobody acted is acted on at the next check."""
        if active:
            self.consumers.add(consumer)
        else:
            self.consumers.discard(consumer)

    def stop_agreed(self, step: int, device: torch.device) -> bool:
        """Whether every rank stops after ``step``: collective at check steps (every rank
        must call this at every step), the flag alone in a world of one process."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return self.preemption.received is not None
        return self.preemption.agreed(step, device)

    def preemption_requested(self) -> bool:
        """``ddpimg.preemption_requested``: counts the calls, so every rank checks at the
        same ones."""
        self.acting("api")
        self._api_checks += 1
        return self.stop_agreed(self._api_checks, _collective_device())

    def stop(self, checkpoint: str | None) -> NoReturn:
        """End the script: the ranks agreed and (if given) ``checkpoint`` is written."""
        raise ScriptPreempted(str(self.preemption.received), self.steps, checkpoint)

    # -- resume ------------------------------------------------------------------------------

    def resume_from(self, newest: Callable[[], str | None]) -> str | None:
        """The checkpoint to give a framework whose script passed none: ``--resume PATH``;
        with ``auto`` the framework's ``newest`` one when this run continues one that did
        not complete; else None."""
        if self.options.resume == RESUME_NONE:
            return None
        if self.options.resume != RESUME_AUTO:
            return self.options.resume
        return newest() if self.continuing else None

    def resumed(self, framework: str, path: str, step: int | None) -> None:
        """The framework resumes from ``path``, written after ``step`` optimizer steps (None:
        the framework cannot say without loading it; rank 0 knows it if the previous run
        recorded that checkpoint)."""
        if step is None:
            step = self._recorded_step(path)
        if step is not None:
            self.steps = step
            self.counted_by_framework = True
            self.progress.saved(path, step)
        if self.record is not None:
            entries: dict[str, Any] = {
                "resumed_from": {"framework": framework, "path": path, "step": step}
            }
            if step is not None:
                self.record.rewind(step)
                # The newest checkpoint known until the run writes one: a later run that
                # continues this one learns its step here.
                entries["last_checkpoint"] = {"path": path, "step": step, "utc": utc_now()}
            self.record.update(**entries)

    def _recorded_step(self, path: str) -> int | None:
        if self.record is None:
            return None
        last = (self.record.manifest.get("continues") or {}).get("last_checkpoint") or {}
        step = last.get("step")
        return step if last.get("path") == path and isinstance(step, int) else None

    # -- metrics -----------------------------------------------------------------------------

    def log(self, kind: Kind, step: int | None, scalars: Mapping[str, float | None]) -> None:
        """A metrics line (rank 0; the values are the caller's, already reduced over the
        ranks). ``elapsed_s`` is added: wall time since the script started."""
        if kind == "train" and isinstance(scalars.get("loss"), float | int):
            self.last_loss = float(scalars["loss"])  # type: ignore[arg-type]  # checked
        if self.record is None:
            return
        fields = {name: _finite(value) for name, value in scalars.items()}
        self.record.write(
            {
                "kind": kind,
                "step": self.steps if step is None else step,
                **fields,
                "elapsed_s": round(time.monotonic() - self.started, 3),
            }
        )

    def summarize(self, **totals: Any) -> None:
        """What a framework knows of the whole run, for the summary line."""
        self.summary.update(totals)

    def summary_record(self) -> dict[str, Any]:
        """The summary line of a completed run."""
        return {
            "kind": "summary",
            "steps": self.steps,
            "final_loss": self.last_loss,
            "elapsed_s": round(time.monotonic() - self.started, 3),
            "world_size": self.world_size,
        } | self.summary


def _finite(value: float | None) -> float | None:
    """JSON has no NaN or infinity: they are written as null."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _collective_device() -> torch.device:
    """Where a flag for an all-reduce lives: the current CUDA device under NCCL."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


_current: ScriptRuntime | None = None


def current() -> ScriptRuntime | None:
    """This process's script runtime; None when the script runs without ddpimg's boot."""
    return _current


def activate(runtime: ScriptRuntime) -> None:
    global _current  # noqa: PLW0603  # one runtime per process, set once by the boot
    _current = runtime


def run_dir() -> Path | None:
    """``--out`` of this run (None without ddpimg)."""
    return None if _current is None else Path(_current.options.out)
