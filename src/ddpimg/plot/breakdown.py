"""The step-time breakdown panel of ``ddpimg plot``, drawn when a run was profiled (``train
--profile``): the mean time of a profiled step, split into the loop's phases (data,
forward, backward, optimizer, collective, ...; ``ddpimg.trace_breakdown``), one bar per run
and rank."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ddpimg.plot.run import Run
from ddpimg.trace_breakdown import PHASES

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def draw_breakdown(axes: Axes, runs: Sequence[Run], labels: Sequence[str]) -> None:
    """Stacked horizontal bars: a profiled step's mean milliseconds per phase, a bar for
    each rank of each profiled run."""
    bars = [
        (f"{label}, rank {item.rank}", item)
        for run, label in zip(runs, labels, strict=True)
        for item in run.breakdown
    ]
    phases = [phase for phase in PHASES if any(phase in item.phases for _, item in bars)]
    left = [0.0] * len(bars)
    positions = range(len(bars))
    for phase in phases:
        widths = [1e3 * item.phases.get(phase, 0.0) for _, item in bars]
        axes.barh(positions, widths, left=left, label=phase)
        left = [start + width for start, width in zip(left, widths, strict=True)]
    axes.scatter(
        [1e3 * item.step_s for _, item in bars], positions, marker="|", s=400, color="black",
        label="whole step", zorder=3,
    )  # fmt: skip
    axes.set_yticks(list(positions), [name for name, _ in bars])
    axes.invert_yaxis()
    axes.set(xlabel="ms per step", title="Step-time breakdown of the profiled steps (--profile)")
    axes.legend(
        fontsize="small", ncols=min(len(phases) + 1, 8), loc="upper center",
        bbox_to_anchor=(0.5, -0.25),
    )  # fmt: skip
    axes.grid(True, axis="x", alpha=0.3)
