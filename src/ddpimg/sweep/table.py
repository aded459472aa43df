"""A sweep's points as one table: the point (its directory's name, which is its values),
its status, steps, final (or newest) loss and final eval loss, the best point marked ``*``;
``ddpimg follow`` adds Slurm's state of each point's array task. Names are printed escaped:
they come from a file someone could have written."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ddpimg.errors import printable
from ddpimg.sweep.results import SweepResults


def aligned(rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    """``rows`` (the first: the headers) as columns two spaces apart; the columns in
    ``right`` right-aligned (numbers)."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(width) if column in right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def points_table(results: SweepResults, jobs: Mapping[int, str] | None = None) -> str:
    """The table of ``results``; ``jobs``: Slurm's state of each point's array task, by the
    point's index (a column of its own)."""
    best = results.best()
    best_name = best[0].point.name if best is not None else None
    headers = ["  point", *(["job"] if jobs is not None else []), "status", "steps"]
    headers += ["loss", "eval loss"]
    rows = [headers]
    for result in results.points:
        record = result.record
        steps = None if record is None else record.steps
        rows.append(
            [
                ("* " if result.point.name == best_name else "  ") + printable(result.point.name),
                *([printable(jobs.get(result.point.index, ""))] if jobs is not None else []),
                result.status,
                "" if steps is None else str(steps),
                _number(result.loss),
                _number(result.eval_loss),
            ]
        )
    numbers = {len(headers) - 3, len(headers) - 2, len(headers) - 1}
    return "\n".join(aligned(rows, numbers))
