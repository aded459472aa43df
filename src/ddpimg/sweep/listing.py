"""Sweeps among the runs (``ddpimg runs``): a sweep's directory under the runs root as one
row, and its points as rows of their own (``ddpimg runs SWEEP``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ddpimg.runs.records import COMPLETED
from ddpimg.runs.table import SweepRow
from ddpimg.sweep.results import (
    FAILED,
    RUNNING,
    STOPPED,
    SweepResults,
    counts_words,
    is_sweep,
    read_results,
)
from ddpimg.sweep.spec import SweepError


def sweep_dirs(root: Path) -> Iterator[Path]:
    """The sweep directories directly under ``root``, by name."""
    try:
        entries = sorted(os.scandir(root), key=lambda entry: entry.name)
    except OSError:
        return
    for entry in entries:
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False) and is_sweep(path):
            yield path


def sweep_row(path: Path) -> SweepRow:
    """The sweep in ``path`` as one row; a sweep.json that cannot be read is a row that
    says so."""
    try:
        results = read_results(path)
    except SweepError as err:
        return SweepRow(path.name, "unreadable", None, None, None, str(path), problem=err.message)
    counts = results.counts()
    best = results.best()
    started = [
        result.record.started
        for result in results.points
        if result.record is not None and result.record.started
    ]
    return SweepRow(
        results.file.name if results.file.name == path.name else path.name,
        "sweep: "
        + counts_words(counts, len(results.points))
        + ("" if best is None else f", best {best[0].point.name}"),
        None,
        None if best is None else best[2],
        min(started) if started else None,
        str(path),
        points=len(results.points),
        completed=counts[COMPLETED],
        running=counts[RUNNING],
        failed=counts[FAILED] + counts[STOPPED],
        best=None if best is None else best[0].point.name,
    )


def point_rows(results: SweepResults) -> list[dict[str, Any]]:
    """The points as JSON objects (``ddpimg runs SWEEP --json``)."""
    best = results.best()
    rows = []
    for result in results.points:
        record = result.record
        rows.append(
            {
                "name": result.point.name,
                "index": result.point.index,
                "values": result.point.value_map,
                "status": result.status,
                "steps": None if record is None else record.steps,
                "loss": result.loss,
                "eval_loss": result.eval_loss,
                "best": best is not None and best[0].point.name == result.point.name,
                "directory": str(results.path / result.point.name),
            }
        )
    return rows
