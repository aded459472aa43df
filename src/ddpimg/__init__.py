"""ddpimg: resolve ranks and the site, then run PyTorch DDP / DeepSpeed trainers the same way
on any cluster. See README.md and DESIGN.md for the public interface.

The public Python API is for a user's own script under ``train --script`` (docs/script-api.md):
a plain PyTorch loop says here what ddpimg cannot see by itself. Every call is cheap and
safe anywhere: without ``train --script`` they do nothing (``preemption_requested`` is
False, ``run_dir`` None). Importing ddpimg imports nothing heavy (no torch).

    import ddpimg

    for step, batch in enumerate(loader, start=1):
        ...  # forward, backward, optimizer.step()
        if ddpimg.preemption_requested():   # every rank, at the same point of each step
            save_checkpoint(...)            # your own
            sys.exit(ddpimg.PREEMPTED)      # 75: the job script requeues, the run goes on
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from ddpimg.version import __version__

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["PREEMPTED", "__version__", "log", "preemption_requested", "progress", "run_dir"]

# The exit status of a run stopped for preemption after its checkpoint (exitcodes.PREEMPTED).
PREEMPTED = 75


def progress(step: int | None = None) -> None:
    """Tell the stall watch this rank is moving (``step``: the script's own step count).
    Optimizer steps are seen without it; call it in loops without one, such as a long
    evaluation, so that a rank that stops there is told from one that is slow."""
    from ddpimg.script.runtime import current

    runtime = current()
    if runtime is not None:
        runtime.report_progress(step)


def preemption_requested() -> bool:
    """Whether the job was asked to stop (SIGUSR2 or SIGTERM reached any rank) and every rank
    agrees to stop here. Collective: call it on every rank at the same point of every step
    (the ranks compare their flags every ``--preempt-check-every`` calls). When it returns
    True, save your checkpoint and exit with ``PREEMPTED``."""
    from ddpimg.script.runtime import current

    runtime = current()
    return False if runtime is None else runtime.preemption_requested()


def run_dir() -> Path | None:
    """The run directory (``train --out``), where manifest.json and metrics.jsonl go and a
    script may keep its own files; None without ``train --script``."""
    from ddpimg.script.runtime import run_dir as current_run_dir

    return current_run_dir()


def log(
    step: int | None = None,
    *,
    kind: Literal["train", "eval"] = "train",
    **scalars: float | None,
) -> None:
    """Write a line to metrics.jsonl (rank 0's call counts; others are ignored): ``step``
    (default: optimizer steps so far) and the scalars as given, e.g.
    ``ddpimg.log(step, loss=mean_loss, lr=lr, epoch=epoch)``. The values are taken as they
    are: reduce them over the ranks first for the global batch's loss."""
    from ddpimg.script.runtime import current

    runtime = current()
    if runtime is not None and runtime.rank == 0:
        runtime.log(kind, step, scalars)
