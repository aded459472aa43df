"""A sweep's directory as train --sweep leaves it, made for the tests that read one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddpimg.sweep.spec import parse_sweep, sweep_document
from tests.runs.test_records import make_run


def make_sweep(
    path: Path, texts: list[str], runs: dict[str, tuple[str, list[dict[str, Any]]]]
) -> Path:
    """``path`` holding the sweep of ``texts`` (its sweep.json) and, for each point named in
    ``runs``, a run of that status and those metrics lines."""
    sweep = parse_sweep(texts)
    document = sweep_document(path.name, sweep, ["mnist"], sweep.points())
    path.mkdir(parents=True)
    (path / "sweep.json").write_text(json.dumps(document))
    for name, (status, lines) in runs.items():
        make_run(path / name, status, lines)
    return path


def finished(loss: float, eval_loss: float | None, steps: int = 3) -> list[dict[str, Any]]:
    """A completed run's metrics: a train line a step, then its summary."""
    lines: list[dict[str, Any]] = [
        {"kind": "train", "step": step, "loss": loss * (steps + 1 - step)}
        for step in range(1, steps + 1)
    ]
    if eval_loss is not None:
        lines.append({"kind": "eval", "step": steps, "loss": eval_loss, "accuracy": 0.5})
    summary = {"kind": "summary", "steps": steps, "final_loss": loss, "eval_loss": eval_loss}
    return [*lines, summary]
