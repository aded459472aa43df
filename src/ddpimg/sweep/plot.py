"""``ddpimg plot SWEEP -o FILE.png``: a sweep's points in one figure.

The top panel overlays every point's loss: the training loss at each logged step (a line)
and each evaluation (a marker), coloured on one scale by the first swept option's value (a
colour bar for numbers, on a log scale when the values span a factor of 100 or were drawn
log-uniformly; one colour per value otherwise). Below it, one panel per swept option: each
point's final eval loss against that option's value (the final training loss when no point
evaluated), in the same colours, the best point ringed.

Each point's run is read as ``ddpimg plot`` reads any run (``ddpimg.plot.read_run``: bounded,
every value checked, since a fetched sweep's files came from a cluster), and the figure is
written by ``ddpimg.plot.save_figure``. matplotlib is imported when a figure is drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError, printable
from ddpimg.plot import matplotlib_missing, read_run, save_figure
from ddpimg.sweep.results import read_results
from ddpimg.sweep.spec import LOG

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LEGEND_POINTS = 12  # more points than this: no legend, the colour bar says it
RING = 14.0
TICKED_VALUES = 8  # an option with at most this many values gets a tick at each


@dataclass(frozen=True)
class Curves:
    """What the plot takes from one point: (step, loss) of each train line, (step, loss)
    of each evaluation, the final eval loss and the final training loss."""

    train: list[tuple[float, float]] = field(default_factory=list)
    eval: list[tuple[float, float]] = field(default_factory=list)
    eval_loss: float | None = None
    final_loss: float | None = None


def read_curves(run: Path) -> Curves:
    """What the plot takes of one point's run, read as ``ddpimg plot`` reads any run
    (``ddpimg.plot.read_run``: bounded, every value checked); a point with no metrics yet, or
    whose file does not read, draws nothing."""
    try:
        read = read_run(run)
    except DdpimgError:
        return Curves()
    train = [(float(point.step), point.loss) for point in read.steps]
    evals = [
        (point.step if point.step is not None else (train[-1][0] if train else 0.0), point.loss)
        for point in read.evals
    ]
    final = read.final_loss if read.final_loss is not None else (train[-1][1] if train else None)
    return Curves(train, evals, evals[-1][1] if evals else None, final)


def _numbers(values: Sequence[str]) -> list[float] | None:
    """``values`` as numbers, or None when one is not a number (a categorical option)."""
    out: list[float] = []
    for value in values:
        try:
            number = float(value)
        except ValueError:
            return None
        if not math.isfinite(number):
            return None
        out.append(number)
    return out


def _log_scale(numbers: Sequence[float], kind: str) -> bool:
    positive = [number for number in numbers if number > 0]
    if len(positive) != len(numbers) or not positive:
        return False
    return kind == LOG or max(positive) / min(positive) >= 100


class _Scale:
    """One option's values as positions (numbers, or the order of first appearance) and
    colours."""

    def __init__(self, name: str, kind: str, values: Sequence[str]) -> None:
        self.name = name
        numbers = _numbers(values)
        self.numeric = numbers is not None
        self.categories = list(dict.fromkeys(values))
        self.log = numbers is not None and _log_scale(numbers, kind)
        self.values = list(values)

    def position(self, value: str) -> float:
        return float(value) if self.numeric else float(self.categories.index(value))


def plot_sweep(directory: Path, output: Path) -> Figure:
    """Draw the sweep in ``directory`` into ``output`` (format from its suffix); the figure."""
    try:
        from matplotlib import colormaps
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import LogNorm, Normalize
        from matplotlib.figure import Figure
        from matplotlib.ticker import NullLocator
    except ImportError as err:
        raise matplotlib_missing(err) from err

    results = read_results(directory)
    curves = [read_curves(directory / result.point.name) for result in results.points]
    if not any(curve.train or curve.eval for curve in curves):
        raise DdpimgError(
            f"sweep {printable(results.file.name)} in {directory}: no point has logged a loss yet",
            hint="plot it once its points have run (ddpimg runs SWEEP shows them)",
        )
    names = results.file.axis_names
    kinds = dict(results.file.axes)
    scales = [
        _Scale(name, kinds[name], [result.point.value_map[name] for result in results.points])
        for name in names
    ]
    first = scales[0]
    if first.numeric:
        numbers = [first.position(value) for value in first.values]
        norm: Normalize = (
            LogNorm(min(numbers), max(numbers))
            if first.log
            else Normalize(min(numbers), max(numbers) if max(numbers) > min(numbers) else None)
        )
        colormap = colormaps["viridis"]
        colours = [colormap(norm(number)) for number in numbers]
    else:
        palette = colormaps["tab10"]
        colours = [palette(first.categories.index(value) % 10) for value in first.values]

    figure = Figure(figsize=(max(8.0, 4.5 * len(scales)), 8.5), layout="constrained")
    grid = figure.add_gridspec(2, len(scales))
    curves_ax = figure.add_subplot(grid[0, :])
    for result, curve, colour in zip(results.points, curves, colours, strict=True):
        label = printable(result.point.name)
        if curve.train:
            xs, ys = zip(*curve.train, strict=True)
            curves_ax.plot(xs, ys, color=colour, linewidth=1.5, label=label)
            label = "_nolegend_"
        if curve.eval:
            xs, ys = zip(*curve.eval, strict=True)
            curves_ax.plot(xs, ys, color=colour, marker="o", linestyle="--", label=label)
    curves_ax.set(
        xlabel="step",
        ylabel="loss",
        title=f"sweep {printable(results.file.name)}: loss of each point (lines: training, "
        f"markers: evaluation), coloured by {first.name}",
    )
    curves_ax.grid(True, alpha=0.3)
    if first.numeric:
        bar = figure.colorbar(ScalarMappable(norm=norm, cmap=colormap), ax=curves_ax)
        bar.set_label(first.name)
    if len(results.points) <= LEGEND_POINTS and curves_ax.get_legend_handles_labels()[0]:
        curves_ax.legend(fontsize="small")

    evaluated = any(curve.eval_loss is not None for curve in curves)
    metric = "final eval loss" if evaluated else "final training loss"
    best = results.best()
    best_name = best[0].point.name if best is not None else None
    for column, scale in enumerate(scales):
        axes = figure.add_subplot(grid[1, column])
        for result, curve, colour in zip(results.points, curves, colours, strict=True):
            value = curve.eval_loss if evaluated else curve.final_loss
            if value is None:
                continue
            x = scale.position(result.point.value_map[scale.name])
            axes.scatter([x], [value], color=colour, zorder=3)
            if result.point.name == best_name:
                axes.scatter(
                    [x], [value], s=RING**2, facecolors="none", edgecolors="black", zorder=4
                )
        if scale.log:
            axes.set_xscale("log")
        distinct = sorted({scale.position(value) for value in scale.values})
        if scale.numeric and len(distinct) <= TICKED_VALUES:
            axes.set_xticks(distinct, [f"{number:g}" for number in distinct])
            axes.xaxis.set_minor_locator(NullLocator())
        if not scale.numeric:
            axes.set_xticks(range(len(scale.categories)), [printable(c) for c in scale.categories])
        axes.set(xlabel=scale.name, ylabel=metric, title=f"{metric} against {scale.name}")
        axes.grid(True, alpha=0.3)
    save_figure(figure, output)
    return figure
