"""A sweep's directory read back: ``sweep.json`` (the definition and its points) and each
point's run directory (``ddpimg.runs.records``), without trusting either.

``sweep.json`` may come from anywhere (a fetched sweep, a directory someone handed over): it
is read bounded in size, each field checked, and a point's name must be one plain directory
name, so no point can stand for a path outside the sweep.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpimg.errors import printable
from ddpimg.runs.records import COMPLETED, RunRecord, read_regular, read_run
from ddpimg.sweep.spec import KINDS, SWEEP_FILE, Point, SweepError
from ddpimg.untrusted import parse_json

MAX_SWEEP_FILE = 16 << 20
MAX_POINTS = 100_000
MAX_TEXT = 4096
_DIRECTORY_NAME = re.compile(r"[A-Za-z0-9._=+-]{1,200}")

NOT_STARTED = "not started"
RUNNING = "running"
STOPPED = "stopped"  # preempted or interrupted: the same command continues it
FAILED = "failed"
# The order a verdict counts them in.
CATEGORIES = (COMPLETED, RUNNING, STOPPED, FAILED, NOT_STARTED)


@dataclass(frozen=True)
class SweepFile:
    """``sweep.json`` as read: the sweep's ``name``, the swept ``axes`` by name with the
    kind of their range ("" for a list), the shared ``command`` and the ``points``."""

    name: str
    axes: tuple[tuple[str, str], ...]
    command: tuple[str, ...]
    points: tuple[Point, ...]
    document: Mapping[str, Any]

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.axes)


def is_sweep(directory: Path) -> bool:
    """Whether ``directory`` (not a link) holds a ``sweep.json``."""
    return (
        directory.is_dir()
        and not directory.is_symlink()
        and os.path.lexists(directory / SWEEP_FILE)
    )


def _bad(path: Path, what: str) -> SweepError:
    return SweepError(
        f"{printable(str(path))}: {what}",
        hint="sweep.json is written by train --sweep and ddpimg sbatch --sweep; it lists the "
        "sweep's points",
    )


def read_sweep_file(directory: Path) -> SweepFile:
    """``directory/sweep.json``; SweepError naming what does not fit."""
    path = directory / SWEEP_FILE
    try:
        data: Any = parse_json(read_regular(path, MAX_SWEEP_FILE))
    except FileNotFoundError:
        raise _bad(path, "no such file (not a sweep's directory)") from None
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) else str(err)
        raise _bad(path, f"cannot be read ({reason})") from err
    if not isinstance(data, dict) or data.get("kind") != "ddpimg-sweep":
        raise _bad(path, "not a sweep's definition")
    name = data.get("name")
    command = data.get("command")
    axes = data.get("axes")
    points = data.get("points")
    if not isinstance(name, str) or not _DIRECTORY_NAME.fullmatch(name):
        raise _bad(path, "its name is not a directory name")
    if not (isinstance(command, list) and all(isinstance(w, str) for w in command)):
        raise _bad(path, "its command is not a list of words")
    if not isinstance(axes, list) or not all(_axis(item) for item in axes):
        raise _bad(path, "its axes are not a list of names with values or a range")
    if not isinstance(points, list) or len(points) > MAX_POINTS:
        raise _bad(path, f"its points are not a list of at most {MAX_POINTS:,}")
    names = [item["name"] for item in axes]
    read = tuple(_point(path, item, names) for item in points)
    if len({point.name for point in read}) != len(read):
        raise _bad(path, "two points share a name")
    return SweepFile(
        name,
        tuple((item["name"], item.get("range", "")) for item in axes),
        tuple(command),
        read,
        data,
    )


def _axis(item: Any) -> bool:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        return False
    if "range" in item:
        return item["range"] in KINDS
    values = item.get("values")
    return isinstance(values, list) and all(isinstance(value, str) for value in values)


def _point(path: Path, item: Any, names: Sequence[str]) -> Point:
    if not isinstance(item, dict):
        raise _bad(path, "a point is not a JSON object")
    index, name, values = item.get("index"), item.get("name"), item.get("values")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise _bad(path, "a point's index is not a whole number")
    if not isinstance(name, str) or not _DIRECTORY_NAME.fullmatch(name) or name in (".", ".."):
        raise _bad(path, f"the point name {printable(str(name)[:100])!r} is not a directory name")
    if not isinstance(values, dict) or sorted(values) != sorted(names):
        raise _bad(path, f"point {name}: its values do not name the sweep's axes")
    if not all(isinstance(value, str) and len(value) <= MAX_TEXT for value in values.values()):
        raise _bad(path, f"point {name}: a value is not a string")
    return Point(index, tuple((key, values[key]) for key in names), name)


@dataclass(frozen=True)
class PointResult:
    """A point and its run as read (``record`` None: no directory yet)."""

    point: Point
    record: RunRecord | None

    @property
    def status(self) -> str:
        """The run's status, or ``not started``."""
        if self.record is None or (self.record.manifest is None and self.record.steps is None):
            return NOT_STARTED
        return self.record.status

    @property
    def category(self) -> str:
        status = self.status
        if status in (COMPLETED, RUNNING, NOT_STARTED):
            return status
        return STOPPED if status in ("preempted", "interrupted") else FAILED

    @property
    def eval_loss(self) -> float | None:
        return _finite(None if self.record is None else self.record.eval_loss)

    @property
    def loss(self) -> float | None:
        return _finite(None if self.record is None else self.record.loss)


def _metric(result: PointResult, metric: str) -> float | None:
    return result.eval_loss if metric == "eval loss" else result.loss


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True)
class SweepResults:
    """A sweep directory read: its file and every point's run."""

    path: Path
    file: SweepFile
    points: tuple[PointResult, ...]

    def counts(self) -> Counter[str]:
        return Counter(result.category for result in self.points)

    def best(self) -> tuple[PointResult, str, float] | None:
        """The completed point with the lowest final eval loss (the lowest final train loss
        when no completed point evaluated), the metric's name and its value."""
        done = [result for result in self.points if result.category == COMPLETED]
        for metric in ("eval loss", "loss"):
            scored = [
                (value, result) for result in done if (value := _metric(result, metric)) is not None
            ]
            if scored:
                value, result = min(scored, key=lambda pair: (pair[0], pair[1].point.index))
                return result, metric, value
        return None

    @property
    def ended(self) -> bool:
        """No point is running or waiting to start."""
        counts = self.counts()
        return not counts[RUNNING] and not counts[NOT_STARTED]

    @property
    def ok(self) -> bool:
        return self.counts()[COMPLETED] == len(self.points)


def counts_words(counts: Mapping[str, int], total: int) -> str:
    """``3/4 completed, 1 running``: completed always, the others when there are any."""
    parts = [f"{counts.get(COMPLETED, 0)}/{total} completed"]
    parts += [f"{counts[name]} {name}" for name in CATEGORIES[1:] if counts.get(name)]
    return ", ".join(parts)


def verdict(results: SweepResults) -> str:
    """``4/4 completed; best lr=0.5_seed=1 (eval loss 0.4321)``."""
    words = counts_words(results.counts(), len(results.points))
    best = results.best()
    if best is not None:
        result, metric, value = best
        words += f"; best {printable(result.point.name)} ({metric} {value:.4g})"
    return words


def read_results(directory: Path) -> SweepResults:
    """``directory`` read as a sweep (SweepError when its sweep.json does not fit)."""
    file = read_sweep_file(directory)
    results = []
    for point in file.points:
        path = directory / point.name
        exists = path.is_dir() and not path.is_symlink()
        results.append(PointResult(point, read_run(path) if exists else None))
    return SweepResults(directory, file, tuple(results))
