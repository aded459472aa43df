"""``--out/trackers.json``: which tracker run each tracker of this ``--out`` writes to, so
that a requeued job that resumes from one of ``--out``'s checkpoints continues the same
W&B run and the same MLflow run. Written atomically by rank 0 when the trackers open."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddpimg.fsio import write_json_atomic
from ddpimg.untrusted import MIB, read_json

STATE_FILE = "trackers.json"
STATE_LIMIT = MIB  # two trackers' run ids: a few hundred bytes


def read_state(out: Path) -> dict[str, dict[str, Any]]:
    """The run each tracker wrote to last, by tracker name; {} when unknown or unreadable
    (the trackers then start new runs, which is all a reader of this file can lose)."""
    try:
        data = read_json(out / STATE_FILE, STATE_LIMIT)
    except (OSError, ValueError):  # untrusted.BadInput included
        return {}
    if not isinstance(data, dict):
        return {}
    return {name: entry for name, entry in data.items() if isinstance(entry, dict)}


def write_state(out: Path, state: dict[str, dict[str, Any]]) -> None:
    write_json_atomic(out / STATE_FILE, state)
