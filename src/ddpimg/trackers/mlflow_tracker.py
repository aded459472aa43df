"""MLflow: a run in the experiment ``--project`` names (or ``MLFLOW_EXPERIMENT_NAME``), in
the server or store ``MLFLOW_TRACKING_URI`` names, otherwise in a file store under
``--out/mlruns``.

Written through ``MlflowClient`` (no fluent API: no active-run stack in a global). The
manifest's description of the run goes in as parameters; the run's end as MLflow's run
status (completed: FINISHED, preempted or interrupted: KILLED, failed: FAILED) with
``manifest.json`` as an artifact. A job that resumes from one of ``--out``'s checkpoints
continues the run ``--out/trackers.json`` names (status back to RUNNING); parameters are
immutable in MLflow, so a resumed run adds only those it did not have.

MLflow 3 keeps its file store in maintenance mode and refuses it unless
``MLFLOW_ALLOW_FILE_STORE`` is true. ddpimg sets that for the file store it chooses itself:
plain files on a parallel file system need no database (an SQLite file there suffers from
the file system's locking) and can be copied into a server later (``ddpimg sync``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpimg.run_files import MANIFEST
from ddpimg.trackers.records import parameters
from ddpimg.trackers.settings import MLFLOW, TrackerSettings

if TYPE_CHECKING:
    from mlflow import MlflowClient

ALLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"
_STATUS = {"completed": "FINISHED", "preempted": "KILLED", "interrupted": "KILLED"}
_BAD_KEY_CHARACTERS = re.compile(r"[^\w./\- ]")
# How long the first connection to a tracking server may take.
CONNECT_TIMEOUT_S = 10.0
# MLflow's own waits for a server that accepted the connection: a request may take 30 s and
# is retried twice (MLflow's defaults: 120 s and 7 retries with backoff, about 5 minutes).
BOUNDED_WAITS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "30", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2"}


def allow_file_store(uri: str) -> None:
    """Let MLflow open a file store (see the module docstring); a user's own setting stays.
    For a server: check that it answers (``check_reachable``) and bound MLflow's own waits
    (``BOUNDED_WAITS``), unless the user set them."""
    if uri.startswith("file:"):
        os.environ.setdefault(ALLOW_FILE_STORE, "true")
        return
    check_reachable(uri)
    for name, value in BOUNDED_WAITS.items():
        os.environ.setdefault(name, value)


def check_reachable(uri: str) -> None:
    """Connect to an http(s) tracking server's port, for at most ``CONNECT_TIMEOUT_S``:
    MLflow's client retries a refused connection with backoff for minutes, silently. An
    OSError names what the connection met."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        raise ConnectionError(
            f"MLFLOW_TRACKING_URI={uri}: no server answers at {parts.hostname}:{port} ({reason}"
            f", waited at most {CONNECT_TIMEOUT_S:g} s)"
        ) from err


def mlflow_key(name: str) -> str:
    """``name`` with the characters MLflow refuses in a metric or parameter name replaced."""
    return _BAD_KEY_CHARACTERS.sub("_", name)


def experiment_id(client: MlflowClient, name: str) -> str:
    """The id of experiment ``name``, created if it does not exist."""
    experiment = client.get_experiment_by_name(name)
    return experiment.experiment_id if experiment is not None else client.create_experiment(name)


def log_params(client: MlflowClient, run_id: str, params: Iterable[tuple[str, str]]) -> None:
    """Log the parameters the run does not have yet (MLflow refuses to change one)."""
    from mlflow.entities import Param

    have = client.get_run(run_id).data.params
    new = [Param(key, value) for key, value in params if key not in have]
    if new:
        client.log_batch(run_id, params=new)


class MlflowTracker:
    name = MLFLOW

    def __init__(self, client: MlflowClient, run_id: str, out: Path, uri: str) -> None:
        self.client, self.run_id, self.out, self.uri = client, run_id, out, uri

    @classmethod
    def open(
        cls,
        settings: TrackerSettings,
        described: Mapping[str, Any],
        previous: Mapping[str, Any] | None,
        resume_step: int | None,
    ) -> MlflowTracker:
        uri = settings.mlflow_uri
        allow_file_store(uri)  # first: it checks that a server answers, without mlflow

        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        run_id = _continued_run(client, previous, uri)
        if run_id is None:
            tags = {"ddpimg.out": str(settings.out.resolve())}
            if settings.run_group:
                tags["ddpimg.group"] = settings.run_group
            run = client.create_run(
                experiment_id(client, settings.experiment), run_name=settings.run_name, tags=tags
            )
            run_id = run.info.run_id
        else:
            client.update_run(run_id, status="RUNNING")
        params = parameters(described).items()
        log_params(client, run_id, ((mlflow_key(key), value) for key, value in params))
        return cls(client, run_id, settings.out, uri)

    @property
    def state(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "tracking_uri": self.uri}

    def log(self, values: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_key(key), value, now, step) for key, value in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def finish(self, status: str, exit_status: int) -> None:
        manifest = self.out / MANIFEST
        if manifest.is_file():
            self.client.log_artifact(self.run_id, str(manifest))
        self.client.set_terminated(self.run_id, status=_STATUS.get(status, "FAILED"))


def _continued_run(
    client: MlflowClient, previous: Mapping[str, Any] | None, uri: str
) -> str | None:
    """The run to continue: the previous one, when it is in the same store and still there."""
    if previous is None or previous.get("tracking_uri") != uri:
        return None
    run_id = previous.get("run_id")
    if not isinstance(run_id, str):
        return None
    from mlflow.exceptions import MlflowException

    try:
        client.get_run(run_id)
    except MlflowException:
        return None
    return run_id
