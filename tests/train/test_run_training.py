"""``run_training`` end to end in one process (1-rank gloo group): what lands in --out."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ddpimg.errors import DataError, DdpimgError
from ddpimg.runs import lock
from ddpimg.runtime.context import DistContext
from ddpimg.train import run_training
from ddpimg.train.config import TrainConfig
from ddpimg.train.tasks import TRAINERS, arguments_json


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_writes_metrics_and_manifest(
    ctx: DistContext,
    make_config: Callable[..., TrainConfig],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = make_config(out=tmp_path / "run", log_every=2)
    assert run_training(config, ctx) == 0
    # The last line says where everything went (the final checkpoint included).
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"ddpimg: completed; metrics: {config.out}/metrics.jsonl, "
        f"manifest: {config.out}/manifest.json; checkpoints: {config.out}/checkpoints "
        "(newest step-00000005)"
    )

    lines = records(config.out)
    assert [(r["kind"], r.get("step", r.get("steps"))) for r in lines] == [
        ("train", 2),
        ("train", 4),
        ("eval", 5),
        ("summary", 5),
    ]
    train = lines[0]
    assert set(train) == {"kind", "epoch", "step", "loss", "samples_per_s", "elapsed_s", "lr"}
    assert train["epoch"] == 1
    assert 0 < train["loss"] < 10
    assert train["samples_per_s"] > 0
    assert lines[1]["elapsed_s"] >= train["elapsed_s"] > 0
    evaluation = lines[2]
    assert evaluation["epoch"] == 1
    assert 0 <= evaluation["accuracy"] <= 1
    assert evaluation["accuracy"] * 40 == pytest.approx(round(evaluation["accuracy"] * 40))
    summary = lines[3]
    assert summary["steps"] == 5
    assert summary["epochs"] == 1
    assert summary["world_size"] == 1
    assert summary["global_batch_size"] == 8
    assert summary["eval_loss"] == evaluation["loss"]
    assert summary["eval_accuracy"] == evaluation["accuracy"]
    assert math.isfinite(summary["final_loss"])
    assert summary["samples_per_s"] > 0

    manifest = json.loads((config.out / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["exit_status"] == 0
    # --precision auto is recorded as what it became on this device.
    auto = TRAINERS[config.trainer].auto_precision("cpu")
    assert manifest["arguments"] == arguments_json(config.with_auto_precision(auto))
    assert manifest["seed"] == 1
    assert manifest["run_info"] == {"source": "single", "site": "local"}
    assert manifest["distributed"]["world_size"] == 1
    assert manifest["versions"]["torch"]
    assert manifest["started_utc"] <= manifest["ended_utc"]


def test_failure_is_recorded_in_the_manifest(
    ctx: DistContext, make_config: Callable[..., TrainConfig]
) -> None:
    config = make_config(train_samples=6, batch_size=8)
    with pytest.raises(DataError, match=r"6 training samples do not fill one global batch of 8"):
        run_training(config, ctx)
    manifest = json.loads((config.out / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["exit_status"] == 2
    assert "do not fill one global batch" in manifest["error"]
    assert manifest["ended_utc"]


def test_an_uneven_global_batch_fails_before_anything_is_written(
    ctx: DistContext, make_config: Callable[..., TrainConfig], tmp_path: Path
) -> None:
    config = make_config(out=tmp_path / "run", batch_size=None, global_batch_size=9)
    with pytest.raises(DdpimgError, match=r"--global-batch-size 9 is not divisible by the world"):
        run_training(config, replace(ctx, world_size=2))
    assert not config.out.exists()


def test_a_new_run_replaces_the_metrics(
    ctx: DistContext, make_config: Callable[..., TrainConfig]
) -> None:
    config = make_config(max_steps=1)
    run_training(config, ctx)
    run_training(config, ctx)
    assert [r["kind"] for r in records(config.out)] == ["train", "eval", "summary"]


def test_a_run_without_out_takes_a_directory_of_its_own(
    ctx: DistContext,
    make_config: Callable[..., TrainConfig],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run twice, a completed run is kept and a new directory starts; a run of these options
    that did not complete is continued (its checkpoints resumed) by the same options."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    held: list[int] = []
    monkeypatch.setattr(lock, "_held", held)

    def ended() -> None:  # what the end of a run's process does to its lock
        while held:
            os.close(held.pop())

    root = tmp_path / "runs"
    config = make_config(out=root)
    assert run_training(config, ctx, runs=root) == 0
    ended()
    (first,) = [path for path in root.iterdir() if path.name != "latest"]
    assert first.name.startswith(f"{config.trainer}-")
    said = capsys.readouterr().err
    assert said.startswith(f"ddpimg: new run directory {first} ({root}/latest points to it)\n")
    manifest = json.loads((first / "manifest.json").read_text())
    assert manifest["arguments"]["out"] == str(first)
    assert records(first)[-1]["kind"] == "summary"

    assert run_training(config, ctx, runs=root) == 0
    ended()
    second = root / os.readlink(root / "latest")
    assert second != first
    assert second.parent == root
    assert json.loads((first / "manifest.json").read_text()) == manifest  # never re-entered

    # The newest run of these options stopped (a Ctrl-C, say): the same options continue it.
    stopped = json.loads((second / "manifest.json").read_text()) | {"status": "interrupted"}
    (second / "manifest.json").write_text(json.dumps(stopped))
    capsys.readouterr()
    assert run_training(config, ctx, runs=root) == 0
    said = capsys.readouterr().err
    assert said.startswith(
        f"ddpimg: continuing {second}, the newest run of these options (interrupted at step 5)"
    )
    assert f"ddpimg: resuming from {second}/checkpoints/step-00000005" in said
    assert sorted(path.name for path in root.iterdir()) == sorted(
        ["latest", first.name, second.name]
    )
    assert json.loads((second / "manifest.json").read_text())["status"] == "completed"


def test_unwritable_out_is_a_user_error(
    ctx: DistContext, make_config: Callable[..., TrainConfig], tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    config = make_config(out=tmp_path / "file" / "run")
    with pytest.raises(DdpimgError, match=rf"--out {tmp_path}/file/run: cannot write there"):
        run_training(config, ctx)


def test_fp16_trains(ctx: DistContext, make_config: Callable[..., TrainConfig]) -> None:
    config = make_config(precision="fp16", max_steps=12, train_samples=96, log_every=1)
    assert run_training(config, ctx) == 0
    losses = [r["loss"] for r in records(config.out) if r["kind"] == "train"]
    assert all(math.isfinite(loss) for loss in losses)
    # The first steps overflow at the initial scale and are skipped; then it learns.
    assert min(losses[-3:]) < losses[0]


def test_memory_snapshot_on_the_cpu_is_a_user_error(
    ctx: DistContext, make_config: Callable[..., TrainConfig], tmp_path: Path
) -> None:
    config = make_config(out=tmp_path / "run", profile_steps=(1, 2), memory_snapshot=True)
    with pytest.raises(DdpimgError, match="--memory-snapshot records the CUDA caching allocator"):
        run_training(config, ctx)
    assert not config.out.exists()


def test_profile_steps_past_the_end_profile_nothing_and_say_so(
    ctx: DistContext,
    make_config: Callable[..., TrainConfig],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = make_config(out=tmp_path / "run", profile_steps=(6, 9))
    assert run_training(config, ctx) == 0
    assert "--profile 6-9: the run trains 5 steps; nothing is profiled" in capsys.readouterr().err
    assert not (config.out / "profile").exists()
