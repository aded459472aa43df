"""Where a run's time to its first training step goes.

``mark(phase)`` is called once at the end of each phase, in the order of ``PHASES``;
``startup_report`` turns the marks into seconds per phase for manifest.json's ``startup``
entry. Marks are wall-clock times (``time.time()``), so that a parent process (the
benchmarks) can put its own clock readings next to them.

The phases: ``launch`` (interpreter start, ddpimg's imports, argument parsing; measured
from the process's start time, which Linux records in 10 ms ticks), ``plan`` (topology and
site resolution, the module-free environment), ``imports`` (torch and the trainer),
``process_group`` (``init_process_group``, the rendezvous join check, device binding),
``setup`` (the strategy's imports, e.g. DeepSpeed; the checkpoint to resume from; rank 0's
output directory and manifest), ``data`` (the data set loaded or made), ``model`` (model
built on the device, wrapped by the strategy: DDP's broadcast from rank 0, DeepSpeed's
initialisation, FSDP's sharding; a checkpoint restored), ``first_step`` (the first
optimizer step, the device synchronised).
Stdlib only: ``train`` imports this before torch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

PHASES = (
    "launch", "plan", "imports", "process_group", "setup", "data", "model", "first_step",
)  # fmt: skip

_marks: dict[str, float] = {}


def mark(phase: str) -> None:
    """Record the end of ``phase`` now; only its first mark counts."""
    if phase not in PHASES:
        raise ValueError(f"unknown startup phase {phase!r}; expected one of {PHASES}")
    _marks.setdefault(phase, time.time())


def marks() -> dict[str, float]:
    return dict(_marks)


def process_start_time(proc: str = "/proc") -> float | None:
    """This process's start as a wall-clock time, or None where /proc cannot say.

    /proc/self/stat gives the start in clock ticks since boot, /proc/uptime the time since
    boot (both on the boot-time clock); their difference is the process's age. The start
    of a process that replaced itself with exec (the module-free re-exec) is that of the
    first program: its whole launch is counted.
    """
    try:
        with open(f"{proc}/self/stat") as stat, open(f"{proc}/uptime") as uptime:
            # The command name (field 2) may hold spaces: count fields after its ")".
            fields = stat.read().rsplit(")", 1)[1].split()
            uptime_s = float(uptime.read().split()[0])
        start_ticks = int(fields[19])  # field 22 of stat(5); fields[0] is field 3
        age_s = uptime_s - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None
    return time.time() - age_s


def startup_report(recorded: Mapping[str, float], started: float | None) -> dict[str, Any]:
    """Seconds per phase (``<phase>_s``; None for a phase with no mark, or for ``launch``
    without a process start), ``total_s`` from the process start (or the first mark) to the
    last mark, and the raw marks."""
    report: dict[str, Any] = {}
    previous = started
    for phase in PHASES:
        at = recorded.get(phase)
        report[f"{phase}_s"] = None if at is None or previous is None else round(at - previous, 4)
        if at is not None:
            previous = at
    present = [recorded[phase] for phase in PHASES if phase in recorded]
    origin = started if started is not None else (present[0] if present else None)
    report["total_s"] = None if origin is None or not present else round(present[-1] - origin, 4)
    report["process_start"] = started
    report["marks"] = dict(recorded)
    return report
