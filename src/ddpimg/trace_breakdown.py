"""Where a profiled step's time goes, read from the traces ``train --profile`` writes
(``--out/profile/rank_N/*.pt.trace.json``, Chrome trace format).

The training loop marks its phases as ``ddpimg/<phase>`` ranges and the profiler marks each
recorded step as ``ProfilerStep#N``; the breakdown is the time in each phase divided by the
number of recorded steps. DDP's gradient all-reduce runs inside the backward pass
(overlapped with it) and counts there; ``collective`` is the loop's own collectives
(the loss reduction at log points, the preemption agreement). Stdlib only; a trace is
data, read within bounds (``ddpimg.untrusted``) and checked, and a malformed one is a
DdpimgError naming it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpimg.errors import DdpimgError
from ddpimg.untrusted import read_json

PROFILE_DIR = "profile"
RANGE_PREFIX = "ddpimg/"
STEP_PREFIX = "ProfilerStep#"
TRACE_GLOB = "*.pt.trace.json"
# A few profiled steps of GPT-2 small trace to tens of MB; parsed, a trace takes several
# times its size in memory.
TRACE_LIMIT = 256 << 20
# The loop's phases, in step order (``ddpimg.runtime.stall.record``).
PHASES = ("data", "forward", "backward", "optimizer", "collective", "checkpoint", "eval")
_RANK_DIR = re.compile(r"rank_(\d+)\Z")


@dataclass(frozen=True)
class StepBreakdown:
    """One rank's trace: ``steps`` recorded, mean seconds per step in each phase
    (``phases``, in PHASES order, phases absent from the trace left out) and in all
    (``step_s``, from the profiler's step ranges)."""

    rank: int
    steps: int
    step_s: float
    phases: dict[str, float]
    trace: Path


def _events(trace: Path) -> list[Mapping[str, Any]]:
    try:
        document = read_json(trace, TRACE_LIMIT)
    except (OSError, ValueError) as err:
        raise DdpimgError(
            f"profiler trace {trace}: unreadable ({err})",
            hint="give the --out of a train --profile run; re-run it if the trace was cut off",
        ) from err
    events = document.get("traceEvents") if isinstance(document, dict) else None
    if not isinstance(events, list):
        raise DdpimgError(
            f"profiler trace {trace}: no traceEvents list",
            hint="a Chrome trace written by torch.profiler was expected",
        )
    return [event for event in events if isinstance(event, dict)]


def _duration_s(event: Mapping[str, Any]) -> float:
    duration = event.get("dur", 0)
    return float(duration) / 1e6 if isinstance(duration, int | float) else 0.0


def breakdown(trace: Path, rank: int) -> StepBreakdown | None:
    """The breakdown of one trace file; None when it recorded no step."""
    totals: dict[str, float] = {}
    steps, step_s = 0, 0.0
    for event in _events(trace):
        name = event.get("name")
        if event.get("ph") != "X" or not isinstance(name, str):
            continue
        if name.startswith(STEP_PREFIX):
            steps += 1
            step_s += _duration_s(event)
        elif name.startswith(RANGE_PREFIX):
            phase = name[len(RANGE_PREFIX) :]
            totals[phase] = totals.get(phase, 0.0) + _duration_s(event)
    if not steps:
        return None
    phases = {phase: totals[phase] / steps for phase in PHASES if phase in totals}
    return StepBreakdown(rank, steps, step_s / steps, phases, trace)


def read_breakdowns(run: Path) -> list[StepBreakdown]:
    """One breakdown per rank with a trace under ``run/profile`` (the newest trace of a
    rank), ordered by rank; [] for a run that was not profiled."""
    found: list[StepBreakdown] = []
    root = run / PROFILE_DIR
    if not root.is_dir():
        return found
    for directory in sorted(root.iterdir()):
        match = _RANK_DIR.match(directory.name)
        traces = sorted(directory.glob(TRACE_GLOB)) if match and directory.is_dir() else []
        if traces:
            result = breakdown(traces[-1], int(match[1]))  # type: ignore[index]
            if result is not None:
                found.append(result)
    return sorted(found, key=lambda item: item.rank)
