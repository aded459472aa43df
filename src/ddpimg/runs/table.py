"""``ddpimg runs``' table: one row a run, whatever it was read from. The local runs come from
the runs root (``records``); a laptop's runs on a cluster (``ddpimg submit``) come from its
state file (``ddpimg.remote.state``) as rows of the same kind, with a ``host:path`` directory.

Names and locations are a run directory's, which anyone could have made: printed with
anything unprintable escaped, so that no name can move the cursor or forge a line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ddpimg.errors import printable
from ddpimg.runs.records import RunRecord

HEADERS = ("run", "status", "steps", "loss", "started", "directory")


@dataclass(frozen=True)
class RunRow:
    """A run as ``ddpimg runs`` lists it; ``loss`` is the final loss of a completed run, else
    the newest logged; ``latest``: ``runs/latest`` points at it."""

    name: str
    status: str
    steps: int | None
    loss: float | None
    started: str | None
    directory: str
    latest: bool = False
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SweepRow(RunRow):
    """A sweep as one line (``ddpimg.sweep``): ``status`` counts its points, ``loss`` is
    its best point's (``best``) final eval loss; the JSON adds the counts."""

    kind: str = "sweep"
    points: int = 0
    completed: int = 0
    running: int = 0
    failed: int = 0
    best: str | None = None


def local_rows(records: Sequence[RunRecord], latest: str | None) -> list[RunRow]:
    """Rows of the runs read from a runs root, by start (a run without one last);
    ``latest``: the name ``runs/latest`` points at."""
    rows = [
        RunRow(
            record.name,
            record.status,
            record.steps,
            record.loss,
            record.started,
            str(record.path),
            latest=record.name == latest,
            problem=record.problem,
        )
        for record in records
    ]
    return sorted(rows, key=lambda row: (row.started is None, row.started or "", row.name))


def render(rows: Sequence[RunRow]) -> str:
    """The rows as aligned columns under HEADERS; the latest run marked with ``*``."""
    cells = [
        (
            ("* " if row.latest else "  ") + printable(row.name),
            printable(row.status),
            "" if row.steps is None else str(row.steps),
            "" if row.loss is None else f"{row.loss:.4g}",
            printable(row.started or ""),
            printable(row.directory),
        )
        for row in rows
    ]
    table = [("  " + HEADERS[0], *HEADERS[1:]), *cells]
    widths = [max(len(line[column]) for line in table) for column in range(len(HEADERS))]
    right = {2, 3}  # numbers
    lines = [
        "  ".join(
            cell.rjust(width) if column in right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in table
    ]
    return "\n".join(lines)
