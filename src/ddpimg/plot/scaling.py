"""The scaling panels of ``ddpimg plot``: throughput against the number of processes (with
ideal linear scaling from the smallest run; repeated world sizes count with their best run)
and scaling efficiency, throughput / (processes x throughput per process of the smallest
run). Drawn only when the runs differ in world size: for one world size they would be a
single point.

Where the runs' ranks computed with different numbers of CPU threads (the manifest's
``run_info.cpu_threads``: one process gets the whole machine, two get half each), the
efficiency compares unequal shares of the CPU and can pass 100%: ``threads_caveat`` says so,
on the panel and on the command's output. ``scaling`` and ``threads_caveat`` need no
matplotlib.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpimg.plot.run import Run

if TYPE_CHECKING:
    from matplotlib.axes import Axes


@dataclass(frozen=True)
class ScalingPoint:
    world_size: int
    samples_per_s: float
    efficiency: float


def world_sizes(runs: Sequence[Run]) -> set[int]:
    """The known world sizes of ``runs``."""
    return {run.world_size for run in runs if run.world_size is not None}


def shows_scaling(runs: Sequence[Run]) -> bool:
    """Whether the scaling panels say anything: the runs differ in world size."""
    return len(world_sizes(runs)) > 1


def scaling(runs: Sequence[Run]) -> list[ScalingPoint]:
    """Throughput and efficiency per world size, from the runs that have both; repeats of a
    world size count with their best throughput (as benchmarks report). Efficiency =
    throughput / (world size x per-process throughput of the smallest world size)."""
    best: dict[int, float] = {}
    for run in runs:
        if run.world_size is not None and run.samples_per_s is not None:
            best[run.world_size] = max(run.samples_per_s, best.get(run.world_size, 0.0))
    measured = sorted(best.items())
    if not measured:
        return []
    base_world, base_rate = measured[0]
    per_process = base_rate / base_world
    return [ScalingPoint(world, rate, rate / (world * per_process)) for world, rate in measured]


def threads_caveat(runs: Sequence[Run]) -> str | None:
    """A note when the runs the scaling panels compare had different CPU threads per
    process; None when they had the same (or it is not known)."""
    threads: dict[int, set[int]] = {}
    for run in runs:
        if run.world_size is not None and run.samples_per_s is not None and run.cpu_threads:
            threads.setdefault(run.world_size, set()).add(run.cpu_threads)
    if len({count for counts in threads.values() for count in counts}) < 2:
        return None
    listed = "; ".join(
        f"{world} process{'' if world == 1 else 'es'}: "
        + "/".join(str(count) for count in sorted(counts))
        + f" thread{'' if counts == {1} else 's'}"
        for world, counts in sorted(threads.items())
    )
    return (
        f"the runs' processes had different CPU threads ({listed}), so scaling efficiency "
        "compares unequal shares of the CPU and can pass 100%; give every run the same "
        "OMP_NUM_THREADS to compare processes alone"
    )


def draw_scaling(rate_ax: Axes, efficiency_ax: Axes, runs: Sequence[Run]) -> None:
    """Throughput and efficiency against processes, or a note where no run finished."""
    points = scaling(runs)
    worlds = [point.world_size for point in points]
    if points:
        base = points[0]
        rate_ax.plot(worlds, [p.samples_per_s for p in points], marker="o", label="measured")
        rate_ax.plot(
            worlds,
            [base.samples_per_s / base.world_size * world for world in worlds],
            linestyle=":",
            color="gray",
            label="linear scaling",
        )
        efficiency_ax.plot(worlds, [100 * p.efficiency for p in points], marker="o")
        efficiency_ax.axhline(100, linestyle=":", color="gray")
        rate_ax.legend(fontsize="small")
    else:
        for axes in (rate_ax, efficiency_ax):
            axes.text(0.5, 0.5, "no finished run", ha="center", transform=axes.transAxes)
    rate_ax.set(xlabel="processes", ylabel="samples/s", title="Throughput against processes")
    efficiency_ax.set(
        xlabel="processes",
        ylabel="efficiency (%)",
        title="Scaling efficiency"
        + (" (threads per process differ)" if threads_caveat(runs) else ""),
    )
    for axes in (rate_ax, efficiency_ax):
        if worlds:
            axes.set_xticks(sorted(set(worlds)))
        axes.grid(True, alpha=0.3)
