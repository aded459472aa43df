"""Copy the MLflow runs of a file store (``--out/mlruns``, written offline on compute
nodes) into the tracking server ``MLFLOW_TRACKING_URI`` names, through MLflow's own client
API on both sides.

Only files inside the run directory are uploaded, whatever the store's metadata says: a
run's ``meta.yaml`` names its artifact location (``artifact_uri``), and one handed to you
could name any folder of yours (``file:///home/me/.ssh``). The artifacts are read from the
run's own folder in the store instead (``mlruns/EXPERIMENT/RUN/artifacts``), walked without
following a link out of it (``ddpimg.untrusted.files_inside``).

Idempotent: each copied run carries the tag ``ddpimg.source_run_id``; a second copy finds
it and adds only what it lacks: parameters, metric values (key, step, timestamp, value),
artifacts, and the final status. A run resumed after the first copy therefore gets its
new values on the next, and a repeat uploads nothing.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError, printable
from ddpimg.trackers.mlflow_tracker import allow_file_store, experiment_id, log_params
from ddpimg.untrusted import BadInput, files_inside, inside

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

SOURCE_TAG = "ddpimg.source_run_id"
# Tags MLflow sets on a run itself; the destination gets its own.
_SYSTEM_TAGS = ("mlflow.runName",)
_METRICS_PER_BATCH = 1000  # MLflow's limit for one log_batch call
# What MLflow's file store names its experiment and run folders: digits, hex ids.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass
class CopyReport:
    """What one run's copy added."""

    source_run: str
    destination_run: str
    experiment: str
    created: bool = False
    params: int = 0
    values: int = 0
    artifacts: int = 0

    @property
    def added(self) -> int:
        return int(self.created) + self.params + self.values + self.artifacts


def source_runs(client: MlflowClient) -> Iterator[tuple[str, Run]]:
    """(experiment name, run) of every run in the store ``client`` reads, deleted ones
    left out."""
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id], max_results=50_000):
            yield experiment.name, run


def _artifact_files(client: MlflowClient, run_id: str, path: str | None = None) -> list[str]:
    files: list[str] = []
    for info in client.list_artifacts(run_id, path):
        if info.is_dir:
            files += _artifact_files(client, run_id, info.path)
        else:
            files.append(info.path)
    return files


def artifact_folder(mlruns: Path, run: Run) -> Path:
    """Where the file store ``mlruns`` keeps ``run``'s artifacts: its own folder, whatever
    its metadata's ``artifact_uri`` says. A run or experiment id that is not a plain name is
    refused (a DdpimgError), not joined to the path."""
    ids: tuple[str, str] = (run.info.experiment_id, run.info.run_id)
    if not all(isinstance(name, str) and _PLAIN_NAME.fullmatch(name) for name in ids):
        raise DdpimgError(
            f"MLflow: {printable(str(mlruns))} holds a run whose ids are not plain names "
            f"({printable(repr(ids))})",
            hint="the store was edited by hand; nothing of it was uploaded",
        )
    return mlruns / ids[0] / ids[1] / "artifacts"


def local_artifacts(folder: Path, mlruns: Path) -> list[str]:
    """The artifact files under ``folder`` as MLflow names them (POSIX paths relative to
    it); a link out of the folder, or a folder that is a link out of ``mlruns``, is a
    DdpimgError naming it (nothing is uploaded)."""
    if not folder.is_dir():
        return []
    try:
        if not inside(folder, mlruns):
            raise BadInput(f"it is a link to {printable(os.path.realpath(folder))}")
        return [path.as_posix() for path in files_inside(folder)]
    except (OSError, ValueError) as err:
        raise DdpimgError(
            f"MLflow: artifacts of {printable(str(folder.parent))}: {err}",
            hint="ddpimg sync uploads only files inside the run directory: remove the link, "
            "or copy what it points at into the run if it belongs there",
        ) from err


def copy_run(
    source: MlflowClient,
    destination: MlflowClient,
    experiment: str,
    run: Run,
    advance: Callable[[int], None],
    *,
    mlruns: Path,
) -> CopyReport:
    """Bring ``run`` (of ``source``, the file store ``mlruns``) into ``destination``'s
    ``experiment``; ``advance(1)`` after each metric's series. The artifacts come from
    ``artifact_folder``: the run's own folder in ``mlruns``."""
    from mlflow.entities import Metric

    run_id = run.info.run_id
    experiment_in_destination = experiment_id(destination, experiment)
    found = destination.search_runs(
        [experiment_in_destination], filter_string=f"tags.`{SOURCE_TAG}` = '{run_id}'"
    )
    report = CopyReport(run_id, "", experiment)
    if found:
        target = found[0].info.run_id
    else:
        tags = {k: v for k, v in run.data.tags.items() if k not in _SYSTEM_TAGS}
        target = destination.create_run(
            experiment_in_destination,
            start_time=run.info.start_time,
            tags=tags | {SOURCE_TAG: run_id},
            run_name=run.info.run_name,
        ).info.run_id
        report.created = True
    report.destination_run = target

    have_params = destination.get_run(target).data.params
    report.params = sum(1 for key in run.data.params if key not in have_params)
    log_params(destination, target, run.data.params.items())

    for key in run.data.metrics:
        history = source.get_metric_history(run_id, key)
        present = {
            (m.step, m.timestamp, m.value) for m in destination.get_metric_history(target, key)
        }
        new = [
            Metric(key, m.value, m.timestamp, m.step)
            for m in history
            if (m.step, m.timestamp, m.value) not in present
        ]
        for start in range(0, len(new), _METRICS_PER_BATCH):
            destination.log_batch(target, metrics=new[start : start + _METRICS_PER_BATCH])
        report.values += len(new)
        advance(1)

    have_files = set(_artifact_files(destination, target))
    folder = artifact_folder(mlruns, run)
    missing = [path for path in local_artifacts(folder, mlruns) if path not in have_files]
    for path in missing:
        destination.log_artifact(target, str(folder / path), posixpath.dirname(path) or None)
    report.artifacts = len(missing)

    status = run.info.status
    if status != "RUNNING" and destination.get_run(target).info.status != status:
        destination.set_terminated(target, status=status, end_time=run.info.end_time)
    return report


def open_store(uri: str) -> MlflowClient:
    from mlflow import MlflowClient

    allow_file_store(uri)
    return MlflowClient(tracking_uri=uri)


def store_uri(mlruns: Path) -> str:
    return mlruns.resolve().as_uri()


def count_series(runs: list[tuple[str, Run]]) -> int:
    """How many metric series the copy of ``runs`` compares (the progress display's unit)."""
    return sum(len(run.data.metrics) for _, run in runs)
