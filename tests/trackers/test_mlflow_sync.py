"""``ddpimg sync`` uploads only files inside the run it syncs (issue 47): a run's
``meta.yaml`` names its artifact location, and one handed to you may name any folder of
yours; a link in the run may point anywhere. Two MLflow file stores stand for the run's own
and the tracking server (the copy goes through MLflow's client on both sides, as to a
server)."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest

from ddpimg.cli.sync_cmd import sync_runs
from ddpimg.errors import DdpimgError
from tests.trackers.offline import loopback_only

__all__ = ["loopback_only"]
pytestmark = pytest.mark.usefixtures("loopback_only")


def offline_run(run: Path) -> str:
    """A run directory as train --log-to mlflow leaves it: manifest.json, and one MLflow run
    in run/mlruns with manifest.json as its artifact. Returns the run's id."""
    from mlflow import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    run.mkdir()
    (run / "manifest.json").write_text('{"status": "completed"}')
    client = MlflowClient((run / "mlruns").as_uri())
    experiment = client.create_experiment("ddpimg")
    run_id: str = client.create_run(experiment).info.run_id
    client.log_metric(run_id, "train/loss", 1.0, step=1)
    client.log_artifact(run_id, str(run / "manifest.json"))
    client.set_terminated(run_id)
    return run_id


def uploaded(destination: Path) -> list[str]:
    from mlflow import MlflowClient

    client = MlflowClient(destination.as_uri())
    names = []
    for experiment in client.search_experiments():
        for found in client.search_runs([experiment.experiment_id]):
            names += [item.path for item in client.list_artifacts(found.info.run_id)]
    return sorted(names)


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    folder = tmp_path / "home" / ".ssh"
    folder.mkdir(parents=True)
    (folder / "id_rsa").write_text("PRIVATE KEY")
    return folder


def test_an_artifact_uri_elsewhere_is_not_followed(tmp_path: Path, secret: Path) -> None:
    run = tmp_path / "run"
    run_id = offline_run(run)
    (meta,) = (run / "mlruns").glob(f"*/{run_id}/meta.yaml")
    text = meta.read_text()
    meta.write_text(re.sub(r"artifact_uri: .*", f"artifact_uri: {secret.as_uri()}", text))
    destination = tmp_path / "server"
    env = {"MLFLOW_TRACKING_URI": destination.as_uri()}
    assert sync_runs([run], env, io.StringIO()) == 0
    assert uploaded(destination) == ["manifest.json"]


def test_a_link_out_of_the_run_uploads_nothing(tmp_path: Path, secret: Path) -> None:
    run = tmp_path / "run"
    run_id = offline_run(run)
    (folder,) = (run / "mlruns").glob(f"*/{run_id}/artifacts")
    (folder / "notes").symlink_to(secret / "id_rsa")
    destination = tmp_path / "server"
    env = {"MLFLOW_TRACKING_URI": destination.as_uri()}
    with pytest.raises(DdpimgError, match=r"artifacts/notes is a link to .*id_rsa, outside"):
        sync_runs([run], env, io.StringIO())
    assert not destination.exists() or uploaded(destination) == []


def test_a_link_in_a_later_run_uploads_nothing_of_an_earlier_one(
    tmp_path: Path, secret: Path
) -> None:
    """Every run given is checked before any is uploaded: the hint's "nothing was uploaded"
    holds for several runs too."""
    clean, linked = tmp_path / "clean", tmp_path / "linked"
    offline_run(clean)
    offline_run(linked)
    (linked / "wandb").mkdir()
    (linked / "wandb" / "offline-run-20260101_000000-abc").symlink_to(secret)
    destination = tmp_path / "server"
    env = {"MLFLOW_TRACKING_URI": destination.as_uri()}
    with pytest.raises(DdpimgError, match=r"W&B: .*offline-run-20260101_000000-abc is a link"):
        sync_runs([clean, linked], env, io.StringIO())
    assert not destination.exists() or uploaded(destination) == []


def test_a_tracker_folder_linked_out_of_the_run_is_refused(tmp_path: Path, secret: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text("{}")
    (run / "mlruns").symlink_to(secret)
    with pytest.raises(DdpimgError, match=r"MLflow: .*run/mlruns is a link to .*\.ssh, outside"):
        sync_runs([run], {"MLFLOW_TRACKING_URI": (tmp_path / "s").as_uri()}, io.StringIO())
    (run / "mlruns").unlink()
    (run / "wandb").mkdir()
    (run / "wandb" / "offline-run-20260101_000000-abc").symlink_to(secret)
    with pytest.raises(DdpimgError, match=r"W&B: .*offline-run-20260101_000000-abc is a link"):
        sync_runs([run], {}, io.StringIO())


def test_what_wandb_sync_uploads_stays_inside_the_run(tmp_path: Path, secret: Path) -> None:
    """W&B uploads the transaction log and the files under files/; its own logs/ (whose
    debug log W&B links into ~/.cache) stay behind and may point anywhere."""
    from ddpimg.trackers.wandb_sync import uploaded_files
    from ddpimg.untrusted import BadInput

    run = tmp_path / "offline-run-20260101_000000-abc"
    (run / "files").mkdir(parents=True)
    (run / "logs").mkdir()
    (run / "run-abc.wandb").write_bytes(b"log")
    (run / "files" / "config.yaml").write_text("{}")
    (run / "logs" / "debug-core.log").symlink_to(secret / "id_rsa")
    assert uploaded_files(run) == [Path("run-abc.wandb"), Path("files/config.yaml")]
    (run / "files" / "model.pt").symlink_to(secret / "id_rsa")
    with pytest.raises(BadInput, match=r"files/model.pt is a link to .*id_rsa, outside"):
        uploaded_files(run)
