"""``plot_runs``: the whole figure of ``ddpimg plot``: the per-run panels (``panels``),
overlaid for several runs and labelled by what differs between them (``labels``); the
scaling panels when the runs differ in world size (``scaling``); the step-time breakdown
when a run was profiled (``breakdown``). Rendered with matplotlib's Agg canvas, without
pyplot (headless: no display, no backend chosen globally); the format comes from the
output's suffix (.png by default, .svg, .pdf).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError
from ddpimg.fsio import write_bytes_atomic
from ddpimg.plot.breakdown import draw_breakdown
from ddpimg.plot.labels import labels, title
from ddpimg.plot.panels import panels, styles
from ddpimg.plot.run import Run
from ddpimg.plot.scaling import draw_scaling, shows_scaling

if TYPE_CHECKING:
    from matplotlib.figure import Figure

WIDTH_IN = 12.0
ROW_IN = 3.4
TITLE_IN = 0.8
DPI = 100


def matplotlib_missing(err: ImportError) -> DdpimgError:
    """The error of a plot (of runs or of a sweep) where matplotlib cannot be imported."""
    return DdpimgError(
        f"ddpimg plot needs matplotlib, which cannot be imported ({err})",
        hint="pip install matplotlib (or ddpimg[plot])",
    )


def plot_runs(runs: Sequence[Run], output: Path) -> Figure:
    """Render ``runs`` into ``output`` (format from its suffix) and return the figure."""
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise matplotlib_missing(err) from err

    names = labels(runs)
    per_run = panels(runs)
    scaled = shows_scaling(runs)
    profiled = any(run.breakdown for run in runs)
    per_run_rows = math.ceil(len(per_run) / 2)
    rows = per_run_rows + int(scaled) + int(profiled)
    figure = Figure(figsize=(WIDTH_IN, TITLE_IN + ROW_IN * rows), dpi=DPI, layout="constrained")
    grid = figure.add_gridspec(rows, 2)
    looks = styles(runs, names)
    for index, draw in enumerate(per_run):
        draw(figure.add_subplot(grid[index // 2, index % 2]), runs, looks)
    row = per_run_rows
    if scaled:
        draw_scaling(figure.add_subplot(grid[row, 0]), figure.add_subplot(grid[row, 1]), runs)
        row += 1
    if profiled:
        draw_breakdown(figure.add_subplot(grid[row, :]), runs, names)
    figure.suptitle(title(runs))
    save_figure(figure, output)
    return figure


def save_figure(figure: Figure, output: Path) -> None:
    """``figure`` into ``output`` in the format its suffix names (a DdpimgError that names it
    when it cannot be written)."""
    try:
        # Rendered in memory, then renamed into place: an existing file (with --force) or
        # link at ``output`` is replaced, never written through.
        image = io.BytesIO()
        figure.savefig(image, format=output.suffix.lstrip(".").lower() or None)
        write_bytes_atomic(output, image.getvalue())
    except (OSError, ValueError) as err:
        raise DdpimgError(
            f"-o {output}: cannot write the plot ({err})",
            hint="give a writable path ending in .png (or .svg, .pdf)",
        ) from err
