"""``ddpimg sync`` on runs that logged offline: MLflow runs copied into a real MLflow
tracking server on loopback, once (a second sync adds nothing, and a run resumed after the
first sync gets only its new values on the next); W&B's own sync invoked on the offline
runs, against a loopback address that refuses it (no W&B server exists here): the upload
fails, ddpimg says so and nothing is marked uploaded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpimg import exitcodes
from ddpimg.trackers.mlflow_sync import SOURCE_TAG
from ddpimg.trackers.state import read_state
from ddpimg.trackers.wandb_sync import is_synced, offline_runs
from tests.integration.runs import QUICK_TRAIN, command, read_metrics, run
from tests.trackers.offline import OFFLINE_ENV
from tests.trackers.servers import RefusingServer, mlflow_server

WAIT_S = 300


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str]) -> Iterator[str]:
    with mlflow_server(tmp_path_factory.mktemp("mlflow-server"), run_env) as uri:
        yield uri


def train(out: Path, env: dict[str, str], log_to: str, *extra: str) -> None:
    cmd = [command("train"), *QUICK_TRAIN, "--log-to", log_to, "--out", str(out), *extra]
    run(cmd, env | OFFLINE_ENV, timeout=WAIT_S)


def sync(run_dir: Path, env: dict[str, str]) -> tuple[int, str]:
    proc = run(
        [command("ddpimg"), "sync", str(run_dir)], env | OFFLINE_ENV, timeout=WAIT_S, check=False
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_mlflow_runs_are_copied_into_a_loopback_server_once(
    tmp_path: Path, run_env: dict[str, str], server: str
) -> None:
    from mlflow import MlflowClient

    out = tmp_path / "run"
    train(out, run_env, "tensorboard,mlflow")
    env = run_env | {"MLFLOW_TRACKING_URI": server}
    status, text = sync(out, env)
    assert status == exitcodes.OK, text
    assert f"TensorBoard: {out / 'tensorboard'}" in text
    assert "created, " in text

    client = MlflowClient(server)
    (copied,) = client.search_runs([client.get_experiment_by_name("ddpimg").experiment_id])
    assert copied.data.tags[SOURCE_TAG] == read_state(out)["mlflow"]["run_id"]
    losses = [(m["step"], m["loss"]) for m in read_metrics(out) if m["kind"] == "train"]

    def server_losses() -> list[tuple[int, float]]:
        history = client.get_metric_history(copied.info.run_id, "train/loss")
        return sorted((m.step, m.value) for m in history)

    assert server_losses() == losses
    assert copied.info.status == "FINISHED"
    assert copied.data.params["arguments.seed"] == "7"
    assert [a.path for a in client.list_artifacts(copied.info.run_id)] == ["manifest.json"]

    status, text = sync(out, env)
    assert status == exitcodes.OK, text
    assert "nothing new" in text
    assert server_losses() == losses

    # The run goes on (a later job with a larger --max-steps); the next sync adds its steps.
    train(out, run_env, "tensorboard,mlflow", "--max-steps", "10", "--epochs", "2")
    status, text = sync(out, env)
    assert status == exitcodes.OK, text
    longer = [(m["step"], m["loss"]) for m in read_metrics(out) if m["kind"] == "train"]
    assert [step for step, _ in longer] == list(range(1, 11))
    assert server_losses() == longer


def test_wandb_sync_runs_and_a_refused_upload_is_reported(
    tmp_path: Path, run_env: dict[str, str]
) -> None:
    out = tmp_path / "run"
    train(out, run_env, "wandb")
    (offline,) = offline_runs(out)
    refusing = RefusingServer()
    try:
        env = run_env | {"WANDB_BASE_URL": refusing.url, "WANDB_API_KEY": "x" * 40}
        status, text = sync(out, env)
    finally:
        refusing.close()
    assert status == exitcodes.TRAINING_FAILED, text
    assert "W&B: 1 offline run directory" in text
    assert f"ddpimg: error: W&B: wandb sync of {offline} failed" in text
    assert refusing.paths, "W&B's sync never reached the loopback server it was given"
    assert not is_synced(offline)
