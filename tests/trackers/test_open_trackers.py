"""``open_trackers`` and ``RunRecorder`` with the three real tracker libraries, in this
process, offline: what metrics.jsonl gets, each tracker's own reader reads back; a resumed
run continues the same runs; a bad setting fails at the start, naming it."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.trackers import TrackerOptions, open_trackers
from ddpimg.trackers.mlflow_tracker import BOUNDED_WAITS
from ddpimg.trackers.state import read_state
from ddpimg.trackers.wandb_sync import offline_runs
from ddpimg.train.outputs import RunRecorder
from ddpimg.train.progress import Progress
from tests.trackers.offline import loopback_only
from tests.trackers.readback import mlflow_run, mlflow_series, tensorboard_scalars, wandb_history

__all__ = ["loopback_only"]
ALL = ("tensorboard", "wandb", "mlflow")
pytestmark = pytest.mark.usefixtures("loopback_only")


def manifest(resumed_step: int | None = None) -> dict[str, Any]:
    return {
        "status": "running",
        "seed": 7,
        "versions": {"torch": "2.14.1", "ddpimg": "0.test"},
        "distributed": {"world_size": 2, "backend": "gloo"},
        "resumed_from": None if resumed_step is None else {"checkpoint": "c", "step": resumed_step},
    }


def record_run(out: Path, steps: range, resumed_step: int | None, keep: int | None) -> str:
    """A run's outputs through RunRecorder: train lines at ``steps``, an eval, the end."""
    stream = io.StringIO()
    env = dict(os.environ)
    trackers = open_trackers(
        ALL, out, manifest(resumed_step), env, resumed=resumed_step is not None,
        options=TrackerOptions(run_name="unit"), stream=stream,
    )  # fmt: skip
    recorder = RunRecorder(out, manifest(resumed_step), Progress(stream), keep, trackers)
    for step in steps:
        recorder.train(1, step, loss=10.0 / step, samples_per_s=100.0, elapsed_s=step, lr=0.1)
    recorder.eval(1, 0.5, 0.75, samples=64, step=steps[-1])
    recorder.finish("completed", 0)
    return stream.getvalue()


def test_every_tracker_reads_back_what_metrics_jsonl_has(tmp_path: Path) -> None:
    messages = record_run(tmp_path, range(1, 6), None, None)
    assert "ddpimg: logging to TensorBoard" in messages
    assert f"upload: ddpimg sync {tmp_path}" in messages
    expected = [(step, 10.0 / step) for step in range(1, 6)]

    board = tensorboard_scalars(tmp_path / "tensorboard")
    assert [(s, pytest.approx(v)) for s, v in board["train/loss"]] == expected
    assert board["eval/accuracy"] == [(5, 0.75)]

    (run_directory,) = offline_runs(tmp_path)
    rows = wandb_history(run_directory, os.environ)
    assert [(row["_step"], row["train/loss"]) for row in rows if "train/loss" in row] == expected
    assert [row["eval/accuracy"] for row in rows if "eval/accuracy" in row] == [0.75]

    client, run_id = mlflow_run(tmp_path)
    assert mlflow_series(client, run_id, "train/loss") == expected
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "unit"
    assert run.data.params["versions.torch"] == "2.14.1"
    assert run.data.params["distributed.world_size"] == "2"
    assert [a.path for a in client.list_artifacts(run_id)] == ["manifest.json"]


def test_a_resumed_run_continues_the_same_runs(tmp_path: Path) -> None:
    record_run(tmp_path, range(1, 6), None, None)
    first = read_state(tmp_path)
    # The resumed job: its checkpoint was at step 3, the stopped run had logged 4 and 5.
    record_run(tmp_path, range(4, 8), 3, 3)
    second = read_state(tmp_path)
    assert second["wandb"]["run_id"] == first["wandb"]["run_id"]
    assert second["mlflow"] == first["mlflow"]

    # TensorBoard purged the stopped run's steps after the checkpoint: each step once.
    board = tensorboard_scalars(tmp_path / "tensorboard")
    assert [s for s, _ in board["train/loss"]] == [1, 2, 3, 4, 5, 6, 7]
    # W&B: a second offline directory of the same run, its rows from step 4 on.
    directories = offline_runs(tmp_path)
    assert len(directories) == 2
    # offline-run-<date>_<time>-<run id>, and W&B adds "-1" when a resumed run starts in
    # the same second as the directory before it.
    ids = {re.fullmatch(r"offline-run-\d+_\d+-(\w+?)(-\d+)?", d.name) for d in directories}
    assert {match.group(1) for match in ids if match} == {first["wandb"]["run_id"]}
    assert all(ids)
    rows = wandb_history(directories[1], os.environ)
    assert [row["_step"] for row in rows if "train/loss" in row] == [4, 5, 6, 7]
    # MLflow: the same run, RUNNING again and then FINISHED, with steps 1 to 7.
    client, run_id = mlflow_run(tmp_path)
    assert {s for s, _ in mlflow_series(client, run_id, "train/loss")} == set(range(1, 8))
    assert client.get_run(run_id).info.status == "FINISHED"


def test_a_fresh_run_starts_new_runs_and_clears_tensorboard(tmp_path: Path) -> None:
    record_run(tmp_path, range(1, 4), None, None)
    first = read_state(tmp_path)
    record_run(tmp_path, range(1, 3), None, None)
    second = read_state(tmp_path)
    assert second["wandb"]["run_id"] != first["wandb"]["run_id"]
    assert second["mlflow"]["run_id"] != first["mlflow"]["run_id"]
    assert [s for s, _ in tensorboard_scalars(tmp_path / "tensorboard")["train/loss"]] == [1, 2]


def test_an_unreachable_server_fails_at_the_start_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A loopback port nothing listens on: refused at once, nothing leaves the machine.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    with pytest.raises(DdpimgError, match="--log-to mlflow: cannot open a run") as info:
        open_trackers(("tensorboard", "mlflow"), tmp_path, manifest(), dict(os.environ), False)
    assert "MLFLOW_TRACKING_URI" in str(info.value)


def test_a_closed_port_is_named_at_once_without_mlflows_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the test's own no-retry settings MLflow's client retried a refused connection
    for 279 s in silence; ddpimg connects once first (at most CONNECT_TIMEOUT_S) and names
    what it met. The alarm only catches a hang (MLflow's retries are minutes)."""
    import signal

    for name in BOUNDED_WAITS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")

    def hung(signum: int, frame: object) -> None:
        raise AssertionError("hang guard: open_trackers still waits after 120 s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    try:
        with pytest.raises(DdpimgError, match=r"no server answers at 127.0.0.1:9 \(Connection "):
            open_trackers(("mlflow",), tmp_path, manifest(), dict(os.environ), False)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
