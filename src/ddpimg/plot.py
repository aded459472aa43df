"""``ddpimg plot RUN_DIR... -o FILE.png``: compare training runs, e.g. the same job on 1, 2
and 4 processes.

Four panels: loss against epoch (training loss at every logged step, evaluation loss after
each epoch), evaluation accuracy against epoch, throughput against the number of processes
(with ideal linear scaling from the smallest run; repeated world sizes count with their
best run), and scaling efficiency: throughput / (processes x throughput per process of the
smallest run). Each run is labelled by its world size (the summary line of metrics.jsonl,
else manifest.json), plus its directory name where two runs share one; runs overlap when
the trajectory does not depend on the topology, so earlier runs are drawn wider. Throughput
is the summary's steady rate (warm-up steps left out) where the run had one, else its
overall rate; runs without a summary (unfinished) appear in the loss and accuracy panels
only. Where the runs' ranks computed with different numbers of CPU threads (the manifest's
``run_info.cpu_threads``: one process gets the whole machine, two get half each), the
efficiency compares unequal shares of the CPU and can pass 100%: ``threads_caveat`` says so,
on the panel and on the command's output.

A fifth panel appears when a run was profiled (``train --profile``): the mean time of a
profiled step, split into the loop's phases (data, forward, backward, optimizer,
collective, ...; ``ddpimg.trace_breakdown``), one bar per run and rank.

Reading runs (``read_run``) and the scaling table (``scaling``) need no matplotlib;
``plot_runs`` imports it when called and renders with the Agg canvas, without pyplot.
"""

from __future__ import annotations

import io
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpimg.errors import DdpimgError
from ddpimg.fsio import write_bytes_atomic
from ddpimg.run_files import MANIFEST, MANIFEST_LIMIT, MAX_METRICS_LINE, METRICS
from ddpimg.trace_breakdown import PHASES, StepBreakdown, read_breakdowns
from ddpimg.untrusted import BadInput, parse_json, read_json, read_lines

if TYPE_CHECKING:
    from matplotlib.figure import Figure


METRICS_HINT = "metrics.jsonl holds one JSON object a line, as train writes it"


@dataclass(frozen=True)
class Run:
    """What the plot takes from one ``train --out`` directory. ``train``: (epoch as a
    fraction, loss) of each logged step; ``eval``: (epoch, loss, accuracy: NaN when none);
    ``samples_per_s``: None for a run without a summary line; ``breakdown``: the
    profiled step's phases on each rank ([] when not profiled); ``cpu_threads``: a CPU
    rank's intra-op threads (None: a GPU run, or not recorded)."""

    path: Path
    world_size: int | None
    train: list[tuple[float, float]] = field(default_factory=list)
    eval: list[tuple[float, float, float]] = field(default_factory=list)
    samples_per_s: float | None = None
    breakdown: list[StepBreakdown] = field(default_factory=list)
    cpu_threads: int | None = None


def _read_records(path: Path) -> list[dict[str, Any]]:
    metrics = path / METRICS
    if not path.is_dir():
        raise DdpimgError(
            f"run directory {path} does not exist", hint="give the --out directories of train runs"
        )
    if not metrics.is_file():
        raise DdpimgError(
            f"run directory {path} has no {METRICS}",
            hint="give the --out directories of train runs (rank 0 writes metrics.jsonl there)",
        )
    records: list[dict[str, Any]] = []
    try:
        for number, line in enumerate(read_lines(metrics, MAX_METRICS_LINE), start=1):
            if not line.strip():
                continue
            try:
                records.append(_record(line))
            except BadInput as err:
                raise DdpimgError(f"{metrics}:{number}: {err}", hint=METRICS_HINT) from err
    except OSError as err:
        raise DdpimgError(f"{metrics}: cannot be read ({err.strerror or err})") from err
    except BadInput as err:  # the file, not a line: binary, or a line without end
        raise DdpimgError(f"{metrics}: {err}", hint=METRICS_HINT) from err
    return records


def _record(line: str) -> dict[str, Any]:
    record = parse_json(line)
    if not isinstance(record, dict) or "kind" not in record:
        raise BadInput(f"expected an object with a 'kind' key, found {line.strip()[:60]!r}")
    _check_record(record)
    return record


# What the plot reads of each kind of line: key -> (kind of value, least value); a key may
# be absent or null. Other kinds of lines, and other keys, are not read.
_NUMBER, _COUNT = "a number", "a whole number"
_READ: dict[str, dict[str, tuple[str, float]]] = {
    "train": {"step": (_COUNT, 0), "epoch": (_NUMBER, 0), "loss": (_NUMBER, -math.inf)},
    "eval": {
        "step": (_COUNT, 0),
        "epoch": (_NUMBER, 0),
        "loss": (_NUMBER, -math.inf),
        "accuracy": (_NUMBER, -math.inf),
    },
    "summary": {
        "world_size": (_COUNT, 1),
        "steps_per_epoch": (_COUNT, 1),
        "samples_per_s": (_NUMBER, 0),
        "steady_samples_per_s": (_NUMBER, 0),
    },
}


def _check_record(record: dict[str, Any]) -> None:
    """A BadInput naming the key whose value the plot cannot read (a string for a loss, a
    negative step); a train line also needs its step and loss."""
    fields = _READ.get(record["kind"]) if isinstance(record["kind"], str) else None
    if fields is None:
        return
    if record["kind"] == "train" and (record.get("step") is None or record.get("loss") is None):
        raise BadInput("a train line needs 'step' and 'loss'")
    for key, (kind, least) in fields.items():
        value = record.get(key)
        if value is None:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or (kind == _COUNT and not isinstance(value, int)) or value < least:
            raise BadInput(f"'{key}' is {value!r}, expected {kind} from {least:g}")


def _manifest_int(path: Path, section: str, key: str) -> int | None:
    """``manifest.json``'s ``section.key`` when it is an integer; None when absent or bad
    (a plot does without it)."""
    try:
        manifest = read_json(path / MANIFEST, MANIFEST_LIMIT)
        value = manifest[section][key]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _fractional_epochs(train: list[dict[str, Any]], steps_per_epoch: int | None) -> list[float]:
    """Where each train line sits in epochs: step / steps per epoch when the summary says
    how many steps an epoch has; the line's own epoch when it is fractional (a Hugging Face
    or Lightning script's); else evenly spread over its epoch. A script that logs no epoch
    (``ddpimg.log(step, loss=...)``) is placed by its step."""
    if steps_per_epoch:
        return [record["step"] / steps_per_epoch for record in train]
    if any("epoch" not in record for record in train):
        return [float(record["step"]) for record in train]
    if any(not float(record["epoch"]).is_integer() for record in train):
        return [float(record["epoch"]) for record in train]
    per_epoch = Counter(record["epoch"] for record in train)
    seen: Counter[int] = Counter()
    positions = []
    for record in train:
        seen[record["epoch"]] += 1
        positions.append(record["epoch"] - 1 + seen[record["epoch"]] / per_epoch[record["epoch"]])
    return positions


def _eval_position(record: dict[str, Any]) -> float:
    """An eval line's epoch; its step for a script that logs none; 0 for neither."""
    for key in ("epoch", "step"):
        if record.get(key) is not None:
            return float(record[key])
    return 0.0


def _accuracy(record: dict[str, Any]) -> float:
    """An eval line's accuracy; NaN (not drawn) for a script that evaluates none."""
    value = record.get("accuracy")
    return float("nan") if value is None else float(value)


def read_run(path: Path) -> Run:
    """The curves of the run in ``path``; a DdpimgError names a missing or bad file."""
    records = _read_records(path)
    summaries = [record for record in records if record["kind"] == "summary"]
    summary = summaries[-1] if summaries else {}
    world_size = summary.get("world_size")
    if not isinstance(world_size, int):
        world_size = _manifest_int(path, "distributed", "world_size")
    train = [record for record in records if record["kind"] == "train"]
    positions = _fractional_epochs(train, summary.get("steps_per_epoch"))
    rate = summary.get("steady_samples_per_s") or summary.get("samples_per_s")
    return Run(
        path=path,
        world_size=world_size,
        train=[(x, float(r["loss"])) for x, r in zip(positions, train, strict=True)],
        eval=[
            (_eval_position(r), float(r["loss"]), _accuracy(r))
            for r in records
            if r["kind"] == "eval" and r.get("loss") is not None
        ],
        samples_per_s=float(rate) if rate else None,
        breakdown=read_breakdowns(path),
        cpu_threads=_manifest_int(path, "run_info", "cpu_threads"),
    )


def labels(runs: Sequence[Run]) -> list[str]:
    """'1 process', '2 processes', ...; the directory name is added where world sizes repeat
    or are unknown."""
    counts = Counter(run.world_size for run in runs)
    out = []
    for run in runs:
        if run.world_size is None:
            out.append(run.path.name or str(run.path))
            continue
        text = f"{run.world_size} process" + ("" if run.world_size == 1 else "es")
        out.append(text if counts[run.world_size] == 1 else f"{text} ({run.path.name})")
    return out


@dataclass(frozen=True)
class ScalingPoint:
    world_size: int
    samples_per_s: float
    efficiency: float


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


def plot_runs(runs: Sequence[Run], output: Path) -> Figure:
    """Render the four panels for ``runs`` into ``output`` (format from its suffix, e.g.
    .png) and return the figure."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as err:
        raise DdpimgError(
            f"ddpimg plot needs matplotlib, which cannot be imported ({err})",
            hint="pip install matplotlib (or ddpimg[plot])",
        ) from err

    profiled = any(run.breakdown for run in runs)
    figure = Figure(figsize=(12, 12 if profiled else 8), layout="constrained")
    grid = figure.add_gridspec(3 if profiled else 2, 2)
    loss_ax, accuracy_ax, rate_ax, efficiency_ax = (
        figure.add_subplot(grid[row, column]) for row in (0, 1) for column in (0, 1)
    )
    if profiled:
        _plot_breakdown(figure.add_subplot(grid[2, :]), runs)
    for order, (run, label) in enumerate(zip(runs, labels(runs), strict=True)):
        # Runs of one job on different topologies overlap (that is the point): earlier runs
        # are drawn wider, so each stays visible around the ones drawn over it.
        width = 1 + 2.5 * (len(runs) - 1 - order) / max(len(runs) - 1, 1)
        if run.train:
            xs, ys = zip(*run.train, strict=True)
            (line,) = loss_ax.plot(xs, ys, linewidth=width, label=f"{label} train")
            color = line.get_color()
        else:
            color = None
        epochs = [epoch for epoch, _, _ in run.eval]
        style: dict[str, Any] = {
            "marker": "o",
            "markersize": 3 + 2 * width,
            "color": color,
            "linewidth": width,
        }
        loss_ax.plot(
            epochs,
            [loss for _, loss, _ in run.eval],
            linestyle="--",
            label=f"{label} eval",
            **style,
        )
        accuracy_ax.plot(epochs, [accuracy for _, _, accuracy in run.eval], label=label, **style)
    loss_ax.set(xlabel="epoch", ylabel="loss", title="Loss (train: every logged step)")
    accuracy_ax.set(xlabel="epoch", ylabel="accuracy", title="Evaluation accuracy")
    accuracy_ax.xaxis.set_major_locator(MaxNLocator(integer=True))

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
    else:
        for axes in (rate_ax, efficiency_ax):
            axes.text(0.5, 0.5, "no finished run", ha="center", transform=axes.transAxes)
    rate_ax.set(xlabel="processes", ylabel="samples/s", title="Throughput")
    caveat = threads_caveat(runs)
    efficiency_ax.set(
        xlabel="processes",
        ylabel="efficiency (%)",
        title="Scaling efficiency" + (" (threads per process differ)" if caveat else ""),
    )
    for axes in (rate_ax, efficiency_ax):
        if worlds:
            axes.set_xticks(sorted(set(worlds)))
    for axes in (loss_ax, accuracy_ax, rate_ax):
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small")
    for axes in (loss_ax, accuracy_ax, rate_ax, efficiency_ax):
        axes.grid(True, alpha=0.3)
    try:
        # Rendered in memory, then renamed into place: an existing file (with --force) or
        # link at ``output`` is replaced, never written through.
        image = io.BytesIO()
        figure.savefig(image, format=output.suffix.lstrip(".").lower() or None)
        write_bytes_atomic(output, image.getvalue())
    except (OSError, ValueError) as err:
        raise DdpimgError(
            f"-o {output}: cannot write the plot ({err})",
            hint="give a writable path ending in .png (or .pdf, .svg)",
        ) from err
    return figure


def _plot_breakdown(axes: Any, runs: Sequence[Run]) -> None:
    """Stacked horizontal bars: a profiled step's mean milliseconds per phase, a bar for
    each rank of each profiled run."""
    bars = [
        (f"{label}, rank {item.rank}", item)
        for run, label in zip(runs, labels(runs), strict=True)
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
