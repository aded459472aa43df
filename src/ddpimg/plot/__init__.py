"""``ddpimg plot RUN...``: one run, or several overlaid.

One run: its loss (every logged train step, the evaluations), learning rate, throughput and
time per step over its steps, with its name, trainer, world size and options in the title.
Several: the same panels overlaid, the legend naming what differs between them; the scaling
panels when they differ in world size; the step-time breakdown of profiled runs.

The modules: ``run`` reads a run directory (no matplotlib: a sweep reads its runs there
too), ``labels`` says what the runs are in words, ``panels`` draws the per-run panels,
``scaling`` the scaling panels, ``breakdown`` the profile, ``figure`` puts them together
(``plot_runs``); only drawing imports matplotlib.
"""

from __future__ import annotations

from ddpimg.plot.figure import matplotlib_missing, plot_runs, save_figure
from ddpimg.plot.labels import labels, title
from ddpimg.plot.run import EvalPoint, Run, TrainPoint, read_run
from ddpimg.plot.scaling import ScalingPoint, scaling, threads_caveat

#: The plot of one run is drawn into its own directory under this name (``ddpimg fetch``
#: draws it there too).
DEFAULT_NAME = "plot.png"

__all__ = [
    "DEFAULT_NAME",
    "EvalPoint",
    "Run",
    "ScalingPoint",
    "TrainPoint",
    "labels",
    "matplotlib_missing",
    "plot_runs",
    "read_run",
    "save_figure",
    "scaling",
    "threads_caveat",
    "title",
]
