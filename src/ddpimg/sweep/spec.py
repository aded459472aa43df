"""A sweep's definition and its points: pure functions of the ``--sweep`` texts, ``--trials``
and ``--sweep-seed``.

An axis is ``NAME=V1,V2,...`` (a list: every value is tried) or ``NAME=KIND:LOW:HIGH`` (a
range, drawn ``--trials`` times): ``log`` (log-uniform, LOW > 0), ``uniform``, ``int``
(uniform over LOW..HIGH, both included). The lists multiply (a grid); the ranges are drawn
together, one value each per trial (a random search), and every trial meets every point of
the grid: ``--sweep lr=log:1e-4:1e-2 --sweep seed=1,2 --trials 8`` is 16 points, 8 learning
rates each with both seeds.

The draws use Python's Mersenne Twister through ``random.random()`` only, the one method whose
sequence Python keeps across versions for a given integer seed, so ``--sweep-seed`` gives the
same points on a laptop and a login node, today and later. A drawn value is rounded to 4
significant digits (``0.0003162``): the value a point runs with is the one its name shows.
Points the rounding makes equal are one point.

A point's name is its values, ``lr=0.5_seed=1``, made safe for a directory name (letters,
digits, ``. + -``; anything else becomes ``_``); two points that would share a name are
refused, naming both. The sweep's own name (its directory under the runs root) is the
trainer or script, the swept names and a digest of the whole definition (the command
included), so that the same command run again finds its sweep and continues it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddpimg.errors import DdpimgError
from ddpimg.runs.names import stem_of

DEFAULT_MAX_POINTS = 1000
LOG, UNIFORM, INT = "log", "uniform", "int"
KINDS = (LOG, UNIFORM, INT)
MAX_VALUE_CHARS = 200
MAX_NAME_CHARS = 120  # a point's directory name; longer ones end in a digest
SIGNIFICANT_DIGITS = 4
DIGEST_CHARS = 6
SWEEP_FILE = "sweep.json"
VERSION = 1

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")
_UNSAFE = re.compile(r"[^A-Za-z0-9.+-]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
SWEEP_HINT = (
    "--sweep NAME=V1,V2 (a list) or --sweep NAME=log:LOW:HIGH with --trials N (a range: "
    "log, uniform or int)"
)


class SweepError(DdpimgError):
    """A sweep that cannot run as given; raised before any point starts."""


@dataclass(frozen=True)
class Axis:
    """One swept name: a list of ``values``, or a range (``kind`` log|uniform|int from
    ``low`` to ``high``) drawn once a trial."""

    name: str
    values: tuple[str, ...] = ()
    kind: str = ""
    low: float = 0.0
    high: float = 0.0

    @property
    def drawn(self) -> bool:
        return bool(self.kind)

    def text(self) -> str:
        """As ``--sweep`` takes it: ``lr=0.5,0.25`` or ``lr=log:0.0001:0.01``."""
        if self.drawn:
            return f"{self.name}={self.kind}:{self.low:g}:{self.high:g}"
        return f"{self.name}={','.join(self.values)}"

    def draw(self, u: float) -> str:
        """The value at ``u`` in [0, 1) of the range, as the text a point runs with."""
        if self.kind == INT:
            low, high = int(self.low), int(self.high)
            return str(min(low + math.floor(u * (high - low + 1)), high))
        if self.kind == LOG:
            value = math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        else:
            value = self.low + u * (self.high - self.low)
        return f"{value:.{SIGNIFICANT_DIGITS}g}"

    def to_json(self) -> dict[str, Any]:
        if self.drawn:
            return {"name": self.name, "range": self.kind, "low": self.low, "high": self.high}
        return {"name": self.name, "values": list(self.values)}


@dataclass(frozen=True)
class Point:
    """One run of a sweep: its place in the sweep (``index``, the array task's id on Slurm),
    its values in the axes' order, and its directory's ``name``."""

    index: int
    values: tuple[tuple[str, str], ...]
    name: str

    @property
    def value_map(self) -> dict[str, str]:
        return dict(self.values)

    def words(self) -> str:
        """``lr=0.5 seed=1``: the values, for a line a user reads."""
        return " ".join(f"{name}={value}" for name, value in self.values)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "values": self.value_map}


@dataclass(frozen=True)
class Sweep:
    """The axes, the draws of the ranges (``trials``, 0 without a range) and their seed."""

    axes: tuple[Axis, ...]
    trials: int = 0
    seed: int = 0

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(axis.name for axis in self.axes)

    def count(self) -> int:
        """How many points the definition asks for (before equal draws are merged)."""
        grid = math.prod(len(axis.values) for axis in self.axes if not axis.drawn)
        return grid * (self.trials if any(axis.drawn for axis in self.axes) else 1)

    def points(self) -> tuple[Point, ...]:
        """Every point, trials outermost, then the lists in the order given."""
        drawn = [axis for axis in self.axes if axis.drawn]
        listed = [axis for axis in self.axes if not axis.drawn]
        generator = random.Random(self.seed)
        draws: list[dict[str, str]] = [
            {axis.name: axis.draw(generator.random()) for axis in drawn}
            for _ in range(self.trials if drawn else 1)
        ]
        combos: list[dict[str, str]] = []
        seen: set[tuple[tuple[str, str], ...]] = set()
        for draw in draws:
            for chosen in itertools.product(*(axis.values for axis in listed)):
                values = draw | dict(zip((axis.name for axis in listed), chosen, strict=True))
                ordered = tuple((axis.name, values[axis.name]) for axis in self.axes)
                if ordered not in seen:
                    seen.add(ordered)
                    combos.append(values)
        points = [
            Point(index, tuple((axis.name, values[axis.name]) for axis in self.axes), "")
            for index, values in enumerate(combos)
        ]
        return tuple(_named(points))

    def to_json(self) -> dict[str, Any]:
        return {
            "axes": [axis.to_json() for axis in self.axes],
            "trials": self.trials,
            "seed": self.seed,
        }


def parse_axis(text: str) -> Axis:
    """One ``--sweep`` value; SweepError naming it when it is not ``NAME=VALUES``."""
    name, equals, rest = text.partition("=")
    if not equals or not _NAME.fullmatch(name):
        raise SweepError(
            f"--sweep {text!r}: expected NAME=VALUES with NAME a train option (lr, "
            "global-batch-size) or a {NAME} placeholder of your script's arguments",
            hint=SWEEP_HINT,
        )
    kind, colon, bounds = rest.partition(":")
    if colon and kind in KINDS:
        return _range(text, name, kind, bounds)
    values = tuple(rest.split(","))
    for value in values:
        if not value:
            raise SweepError(f"--sweep {text!r}: an empty value", hint=SWEEP_HINT)
        if len(value) > MAX_VALUE_CHARS or _CONTROL.search(value):
            raise SweepError(
                f"--sweep {name}: the value {value[:MAX_VALUE_CHARS]!r} is longer than "
                f"{MAX_VALUE_CHARS} characters or holds a control character",
                hint="give each value as the option takes it on the command line",
            )
    repeated = sorted({value for value in values if values.count(value) > 1})
    if repeated:
        raise SweepError(
            f"--sweep {name}: {', '.join(repeated)} given more than once",
            hint="give each value once",
        )
    return Axis(name, values)


def _range(text: str, name: str, kind: str, bounds: str) -> Axis:
    parts = bounds.split(":")
    try:
        low, high = (float(part) for part in parts) if len(parts) == 2 else (math.nan, 0.0)
    except ValueError:
        low, high = math.nan, 0.0
    if kind == INT and all(math.isfinite(x) for x in (low, high)):
        whole = low.is_integer() and high.is_integer()
    else:
        whole = True
    valid = (
        math.isfinite(low)
        and math.isfinite(high)
        and whole
        and (low <= high if kind == INT else low < high)
        and (kind != LOG or low > 0)
    )
    if not valid:
        need = {
            LOG: "0 < LOW < HIGH",
            UNIFORM: "LOW < HIGH",
            INT: "whole numbers LOW <= HIGH",
        }[kind]
        raise SweepError(
            f"--sweep {text!r}: a {kind} range is {kind}:LOW:HIGH with {need}",
            hint=f"e.g. --sweep {name}={kind}:{'1e-4:1e-2' if kind == LOG else '1:8'}",
        )
    return Axis(name, kind=kind, low=low, high=high)


def parse_sweep(
    texts: Sequence[str],
    *,
    trials: int | None = None,
    seed: int | None = None,
    max_points: int = DEFAULT_MAX_POINTS,
) -> Sweep:
    """The sweep of the ``--sweep`` texts; SweepError for a bad axis, a name given twice,
    ``--trials`` without a range (or a range without it), or more than ``max_points``
    points (counted before anything is drawn)."""
    axes = tuple(parse_axis(text) for text in texts)
    names = [axis.name for axis in axes]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise SweepError(
            f"--sweep {twice[0]} is given more than once",
            hint=f"one --sweep per name: --sweep {twice[0]}=V1,V2,V3",
        )
    ranges = [axis.name for axis in axes if axis.drawn]
    if ranges and trials is None:
        raise SweepError(
            f"--sweep {ranges[0]}: a range is drawn --trials times, and --trials is not given",
            hint="add --trials N (the number of draws), and --sweep-seed S to choose them",
        )
    if not ranges and (trials is not None or seed is not None):
        flag = "--trials" if trials is not None else "--sweep-seed"
        raise SweepError(
            f"{flag} draws from ranges, and no --sweep is a range",
            hint=f"drop {flag}, or give a range: --sweep lr=log:1e-4:1e-2",
        )
    if trials is not None and trials < 1:
        raise SweepError(f"--trials {trials}: must be at least 1", hint="--trials 8")
    if max_points < 1:
        raise SweepError(f"--max-points {max_points}: must be at least 1", hint="--max-points 100")
    sweep = Sweep(axes, trials or 0, seed or 0)
    if sweep.count() > max_points:
        sizes = " x ".join(
            [f"{len(axis.values)} {axis.name}" for axis in axes if not axis.drawn]
            + ([f"{trials} trials of {', '.join(ranges)}"] if ranges else [])
        )
        raise SweepError(
            f"the sweep has {sweep.count():,} points ({sizes}), more than --max-points "
            f"{max_points:,}",
            hint="sweep fewer values, or raise --max-points if you mean it (a Slurm array "
            "holds at most the cluster's MaxArraySize elements, 1001 by default)",
        )
    return sweep


def safe(text: str) -> str:
    """``text`` as part of a directory name."""
    return _UNSAFE.sub("_", text)


def _named(points: Sequence[Point]) -> list[Point]:
    """``points`` with their names; SweepError when two would share one."""
    named: list[Point] = []
    owner: dict[str, Point] = {}
    for point in points:
        name = "_".join(f"{key}={safe(value)}" for key, value in point.values)
        if len(name) > MAX_NAME_CHARS:
            digest = hashlib.sha256(name.encode()).hexdigest()[:8]
            name = f"{name[: MAX_NAME_CHARS - 9]}-{digest}"
        if name.lower() in owner:
            other = owner[name.lower()]
            raise SweepError(
                f"--sweep: the points {other.words()!r} and {point.words()!r} would share the "
                f"directory {name} (only letters, digits and . + - are kept)",
                hint="give values that differ in those characters",
            )
        owner[name.lower()] = point
        named.append(Point(point.index, point.values, name))
    return named


def definition(sweep: Sweep, command: Sequence[str]) -> dict[str, Any]:
    """What makes a sweep the same sweep: the train command (without the sweep's own
    options and ``--out``) and the axes, trials and seed."""
    return {"command": list(command), **sweep.to_json()}


def sweep_name(stem: str, sweep: Sweep, command: Sequence[str]) -> str:
    """``mnist-lr-seed-3fa9c2``: the trainer or script, the swept names, and a digest of the
    definition."""
    text = json.dumps(definition(sweep, command), sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]
    names = "-".join(sweep.names)[:60]
    return f"{stem_of(stem)}-{names}-{digest}"


def sweep_document(
    name: str, sweep: Sweep, command: Sequence[str], points: Sequence[Point]
) -> dict[str, Any]:
    """``sweep.json``: the definition, and every point by index, name and values."""
    return {
        "version": VERSION,
        "kind": "ddpimg-sweep",
        "name": name,
        **definition(sweep, command),
        "points": [point.to_json() for point in points],
    }


def same_definition(document: Mapping[str, Any], sweep: Sweep, command: Sequence[str]) -> bool:
    """Whether a ``sweep.json`` read back is of this sweep."""
    wanted = definition(sweep, command)
    return all(document.get(key) == value for key, value in wanted.items())
