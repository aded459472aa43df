"""``--out/trackers.json``: which tracker run each tracker of this ``--out`` writes to, so
that a requeued job that resumes from one of ``--out``'s checkpoints continues the same
W&B run and the same MLflow run. Written atomically by rank 0 when the trackers open."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddpimg.fsio import write_json_atomic

STATE_FILE = "trackers.json"


def read_state(out: Path) -> dict[str, dict[str, Any]]:
    """The run each tracker wrote to last, by tracker name; {} when unknown or unreadable
    (the trackers then start new runs, which is all a reader of this file can lose)."""
    try:
        data = json.loads((out / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {name: entry for name, entry in data.items() if isinstance(entry, dict)}


def write_state(out: Path, state: dict[str, dict[str, Any]]) -> None:
    write_json_atomic(out / STATE_FILE, state)
