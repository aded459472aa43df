"""``train --log-to tensorboard,wandb,mlflow`` on 2 processes under torch elastic, offline:
TensorBoard's reader, W&B's reader of its offline files and MLflow's client read back the
losses of metrics.jsonl; a preempted and requeued run continues the same W&B and MLflow
runs; ``--profile`` writes a readable trace on every rank that ``ddpimg plot`` breaks
down; a bad setting stops every rank at the start (exit 2) before anything is written; an
MLflow server that goes away mid-run costs one warning, not the run."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ddpimg import exitcodes
from ddpimg.trace_breakdown import read_breakdowns
from ddpimg.trackers.state import read_state
from ddpimg.trackers.wandb_sync import offline_runs
from tests.forwarder import Forwarder
from tests.integration.runs import QUICK_TRAIN, command, read_metrics, run
from tests.integration.test_preemption import SIGNAL_AFTER, STEPS, TRAIN, WAIT_S, stop_midway
from tests.trackers.offline import OFFLINE_ENV
from tests.trackers.readback import mlflow_run, mlflow_series, tensorboard_scalars, wandb_history
from tests.trackers.servers import mlflow_server

pytestmark = pytest.mark.torchrun

LOG_TO = ["--log-to", "tensorboard,wandb,mlflow"]
# TensorBoard stores a scalar as float32: a float64 loss comes back within its rounding.
FLOAT32_REL = 2**-23


@pytest.fixture
def env(run_env: dict[str, str]) -> dict[str, str]:
    return run_env | OFFLINE_ENV


def train_losses(out: Path) -> list[tuple[int, float]]:
    return [(m["step"], m["loss"]) for m in read_metrics(out) if m["kind"] == "train"]


def test_two_processes_log_the_same_losses_to_every_tracker(
    tmp_path: Path, env: dict[str, str]
) -> None:
    out = tmp_path / "run"
    cmd = [command("train"), "--nproc-per-node", "2", *QUICK_TRAIN, *LOG_TO, "--out", str(out)]
    run([*cmd, "--profile", "3-5"], env, timeout=WAIT_S)
    expected = train_losses(out)
    assert [step for step, _ in expected] == list(range(1, 9))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["trackers"]["log_to"] == ["tensorboard", "wandb", "mlflow"]
    assert manifest["trackers"]["wandb_mode"] == "offline"

    board = tensorboard_scalars(out / "tensorboard")["train/loss"]
    assert [step for step, _ in board] == [step for step, _ in expected]
    for (_, got), (_, want) in zip(board, expected, strict=True):
        assert got == pytest.approx(want, rel=FLOAT32_REL)

    (run_directory,) = offline_runs(out)
    rows = wandb_history(run_directory, env)
    assert [(row["_step"], row["train/loss"]) for row in rows if "train/loss" in row] == expected
    assert [row["train/lr"] for row in rows if "train/lr" in row] == [
        m["lr"] for m in read_metrics(out) if m["kind"] == "train"
    ]

    client, run_id = mlflow_run(out)
    assert mlflow_series(client, run_id, "train/loss") == expected
    evaluation = next(m for m in read_metrics(out) if m["kind"] == "eval")
    assert mlflow_series(client, run_id, "eval/accuracy") == [(8, evaluation["accuracy"])]
    assert client.get_run(run_id).data.params["distributed.world_size"] == "2"

    # --profile 3-5: three steps traced on each rank, every phase of the loop in them.
    breakdowns = read_breakdowns(out)
    assert [item.rank for item in breakdowns] == [0, 1]
    for item in breakdowns:
        assert item.steps == 3
        assert {"data", "forward", "backward", "optimizer"} <= set(item.phases)
        assert sum(item.phases.values()) <= item.step_s * 1.0001
    plot = tmp_path / "plot.png"
    run([command("ddpimg"), "plot", str(out), "-o", str(plot)], env, timeout=120)
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_a_preempted_and_requeued_run_continues_the_same_runs(
    tmp_path: Path, env: dict[str, str]
) -> None:
    cmd = [command("train"), "--nproc-per-node", "2", *TRAIN, *LOG_TO, "--out", str(tmp_path)]
    stopped = stop_midway(cmd, env, tmp_path, lambda proc: proc.send_signal(signal.SIGUSR2))
    assert stopped.returncode == exitcodes.PREEMPTED, stopped.stderr[-4000:]
    # The workers said why they stopped; torch elastic's "failed (exitcode: 75)" is not added.
    assert "failed (exitcode" not in stopped.stderr, stopped.stderr[-3000:]
    first = read_state(tmp_path)
    client, run_id = mlflow_run(tmp_path)
    assert client.get_run(run_id).info.status == "KILLED"
    stopped_at = max(step for step, _ in train_losses(tmp_path))
    assert SIGNAL_AFTER <= stopped_at < STEPS

    run(cmd, env, timeout=WAIT_S)  # the requeued job: --resume auto
    assert read_state(tmp_path) == first
    expected = train_losses(tmp_path)
    assert [step for step, _ in expected] == list(range(1, STEPS + 1))

    # W&B: one run id, a directory per job; the second job's rows follow the checkpoint.
    first_job, second_job = offline_runs(tmp_path)
    assert first_job.name.endswith(first["wandb"]["run_id"])
    assert second_job.name.endswith(first["wandb"]["run_id"])
    rows = [row for d in (first_job, second_job) for row in wandb_history(d, env)]
    assert [(r["_step"], r["train/loss"]) for r in rows if "train/loss" in r] == expected
    # MLflow: the same run, each step once, finished.
    assert mlflow_series(client, run_id, "train/loss") == expected
    assert client.get_run(run_id).info.status == "FINISHED"
    # TensorBoard: each step once.
    board = tensorboard_scalars(tmp_path / "tensorboard")["train/loss"]
    assert [step for step, _ in board] == list(range(1, STEPS + 1))


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"WANDB_MODE": "cloud"}, "WANDB_MODE='cloud' is not a W&B mode"),
        ({"DDPIMG_LOG_TO": "tensorboard,comet"}, "DDPIMG_LOG_TO: unknown tracker 'comet'"),
        ({"MLFLOW_TRACKING_URI": "https://"}, "MLFLOW_TRACKING_URI='https://' names no server"),
    ],
)
def test_a_bad_setting_stops_every_rank_before_anything_is_written(
    tmp_path: Path, env: dict[str, str], variables: dict[str, str], named: str
) -> None:
    cmd = [command("train"), "--nproc-per-node", "2", *QUICK_TRAIN, "--out", str(tmp_path)]
    if "DDPIMG_LOG_TO" not in variables:
        cmd += LOG_TO
    proc = run(cmd, env | variables, timeout=WAIT_S, check=False)
    assert proc.returncode == exitcodes.USAGE, proc.stderr[-3000:]
    assert f"ddpimg: error: {named}" in proc.stderr
    assert not (tmp_path / "metrics.jsonl").exists()


def test_an_mlflow_server_gone_mid_run_costs_one_warning(
    tmp_path: Path, env: dict[str, str]
) -> None:
    out = tmp_path / "run"
    steps = 60
    with mlflow_server(tmp_path / "server", env) as uri:
        link = Forwarder(int(uri.rsplit(":", 1)[1]))
        cmd = [
            command("train"), "--nproc-per-node", "2", *QUICK_TRAIN, "--max-steps", str(steps),
            "--epochs", "2", "--log-to", "mlflow", "--out", str(out),
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd,
            env=env | {"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{link.port}"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            metrics = out / "metrics.jsonl"
            deadline = time.monotonic() + WAIT_S
            while not (metrics.exists() and metrics.read_text().count('"train"') >= 5):
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                assert time.monotonic() < deadline, f"5 steps not logged in {WAIT_S} s"
                time.sleep(0.05)
            link.cut()
            _, stderr = proc.communicate(timeout=WAIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, stderr[-3000:]
        assert stderr.count("ddpimg: warning: tracker mlflow failed") == 1, stderr[-3000:]
        assert len(train_losses(out)) == steps
        assert json.loads((out / "manifest.json").read_text())["status"] == "completed"
        from mlflow import MlflowClient

        logged = MlflowClient(uri).get_metric_history(
            read_state(out)["mlflow"]["run_id"], "train/loss"
        )
        assert 0 < len(logged) < steps
