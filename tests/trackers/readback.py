"""Read what the trackers wrote with each tracker's own reader: TensorBoard's event
accumulator, W&B's ``wandb leet inspect`` (its reader of the ``.wandb`` transaction log)
and MLflow's client."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddpimg.trackers.mlflow_sync import open_store
from ddpimg.trackers.state import read_state


def tensorboard_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] as TensorBoard shows them (purged steps left out)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def wandb_records(run_directory: Path, env: Mapping[str, str]) -> list[dict[str, Any]]:
    """The records of one offline run directory's transaction log."""
    proc = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_directory)],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=True,
    )
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def wandb_history(run_directory: Path, env: Mapping[str, str]) -> list[dict[str, Any]]:
    """The logged rows (``history`` records) of an offline run directory."""
    return [
        record["history"]["item"]
        for record in wandb_records(run_directory, env)
        if record.get("type") == "history"
    ]


def mlflow_run(out: Path) -> tuple[Any, str]:
    """MLflow's client for the store trackers.json names (a file store opened as ddpimg
    opens it), and the run id."""
    entry = read_state(out)["mlflow"]
    return open_store(entry["tracking_uri"]), entry["run_id"]


def mlflow_series(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    history = client.get_metric_history(run_id, key)
    return sorted((metric.step, metric.value) for metric in history)
