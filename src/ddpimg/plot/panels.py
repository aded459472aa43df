"""The per-run panels of ``ddpimg plot``: how each run moved over its optimizer steps.

* loss: the train loss at every logged step (a line) and each evaluation (dots, at the step
  it followed);
* learning rate, as the train lines record it (``lr``);
* throughput: samples/s between logged steps, evaluations left out (as ``train`` counts it);
* time per step: wall-clock seconds between logged steps over the steps between them, so
  the evaluations and checkpoints that fell in between show as the steps they slowed;
* evaluation accuracy, when a run evaluated more than once (one point says nothing a title
  could not).

Several runs are overlaid, one colour each; runs of one job on different topologies overlap
(that is the point), so earlier runs are drawn wider and stay visible around the ones drawn
over them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddpimg.plot.run import EvalPoint, Run

if TYPE_CHECKING:
    from matplotlib.axes import Axes


@dataclass(frozen=True)
class Style:
    """How one run is drawn: its legend entry, colour and line width."""

    label: str
    color: str
    width: float


Draw = Callable[["Axes", Sequence[Run], Sequence[Style]], None]


def styles(runs: Sequence[Run], labels: Sequence[str]) -> list[Style]:
    """A colour per run from matplotlib's default cycle; earlier runs wider."""
    last = max(len(runs) - 1, 1)
    return [
        Style(label, f"C{order % 10}", 1 + 2.5 * (len(runs) - 1 - order) / last)
        for order, label in enumerate(labels)
    ]


def panels(runs: Sequence[Run]) -> list[Draw]:
    """The panels to draw for ``runs``, in order."""
    chosen: list[Draw] = [draw_loss, draw_learning_rate, draw_throughput, draw_step_time]
    if any(sum(math.isfinite(e.accuracy) for e in run.evals) > 1 for run in runs):
        chosen.append(draw_accuracy)
    return chosen


def step_times(run: Run) -> list[tuple[int, float]]:
    """(step, seconds per step) at each logged step after the first of the run's lines:
    wall time between two lines over the steps between them (evaluations and checkpoints in
    between included); at the first, its time since the loop started over its step. A run
    whose lines carry no elapsed time: its global batch over each line's throughput."""
    timed = [point for point in run.steps if point.elapsed_s is not None]
    if timed:
        times, before = [], (0, 0.0)
        for point in timed:
            assert point.elapsed_s is not None  # (for mypy: filtered above)
            if point.step > before[0]:
                times.append((point.step, (point.elapsed_s - before[1]) / (point.step - before[0])))
            before = (point.step, point.elapsed_s)
        return times
    if run.global_batch is None:
        return []
    return [
        (point.step, run.global_batch / point.samples_per_s)
        for point in run.steps
        if point.samples_per_s
    ]


def draw_loss(axes: Axes, runs: Sequence[Run], looks: Sequence[Style]) -> None:
    alone = len(runs) == 1
    for run, look in zip(runs, looks, strict=True):
        if run.steps:
            axes.plot(
                [point.step for point in run.steps],
                [point.loss for point in run.steps],
                color=look.color,
                linewidth=look.width,
                label="train" if alone else look.label,
            )
        placed = [point for point in run.evals if point.step is not None]
        if placed:
            axes.plot(
                [point.step or 0.0 for point in placed],
                [point.loss for point in placed],
                linestyle="none",
                marker="o",
                markersize=3 + 2 * look.width,
                color=look.color,
                label=_eval_label(placed) if alone else None,
            )
    axes.set(
        xlabel="step",
        ylabel="loss",
        title="Loss: train at every logged step (line), evaluations (dots)",
    )
    _finish(axes, legend=True)


def draw_accuracy(axes: Axes, runs: Sequence[Run], looks: Sequence[Style]) -> None:
    for run, look in zip(runs, looks, strict=True):
        placed = [p for p in run.evals if p.step is not None and math.isfinite(p.accuracy)]
        axes.plot(
            [point.step or 0.0 for point in placed],
            [100 * point.accuracy for point in placed],
            marker="o",
            color=look.color,
            linewidth=look.width,
        )
    axes.set(xlabel="step", ylabel="accuracy (%)", title="Evaluation accuracy")
    _finish(axes)


def draw_learning_rate(axes: Axes, runs: Sequence[Run], looks: Sequence[Style]) -> None:
    drawn = _lines(axes, runs, looks, lambda run: [(p.step, p.lr) for p in run.steps])
    axes.set(xlabel="step", ylabel="learning rate", title="Learning rate")
    _finish(axes, empty=None if drawn else "no learning rate in metrics.jsonl")


def draw_throughput(axes: Axes, runs: Sequence[Run], looks: Sequence[Style]) -> None:
    drawn = _lines(axes, runs, looks, lambda run: [(p.step, p.samples_per_s) for p in run.steps])
    axes.set(
        xlabel="step",
        ylabel="samples/s",
        title="Throughput between logged steps (evaluations left out)",
    )
    _finish(axes, empty=None if drawn else "no throughput in metrics.jsonl")


def draw_step_time(axes: Axes, runs: Sequence[Run], looks: Sequence[Style]) -> None:
    drawn = _lines(axes, runs, looks, lambda run: [(s, 1e3 * t) for s, t in step_times(run)])
    axes.set(
        xlabel="step",
        ylabel="ms per step",
        title="Time per step (wall clock between logged steps)",
    )
    _finish(axes, empty=None if drawn else "no elapsed time in metrics.jsonl")


def _lines(
    axes: Axes,
    runs: Sequence[Run],
    looks: Sequence[Style],
    points: Callable[[Run], Sequence[tuple[float, float | None]]],
) -> bool:
    """A line per run through its ``points`` that have a value; whether any was drawn."""
    drawn = False
    for run, look in zip(runs, looks, strict=True):
        known = [(x, y) for x, y in points(run) if y is not None]
        if known:
            xs, ys = zip(*known, strict=True)
            axes.plot(xs, ys, color=look.color, linewidth=look.width, label=look.label)
            drawn = True
    return drawn


def _eval_label(placed: Sequence[EvalPoint]) -> str:
    """``eval``, and of how many samples when the last evaluation took part of its set."""
    last = placed[-1]
    if last.samples is not None and last.set_samples and last.samples < last.set_samples:
        return f"eval on {last.samples:,} of {last.set_samples:,} samples"
    return "eval"


def _finish(axes: Axes, *, legend: bool = False, empty: str | None = None) -> None:
    from matplotlib.ticker import MaxNLocator

    if empty is not None:
        axes.text(0.5, 0.5, empty, ha="center", va="center", transform=axes.transAxes)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(True, alpha=0.3)
    handles: Any = axes.get_legend_handles_labels()[0]
    if legend and handles:
        axes.legend(fontsize="small")
