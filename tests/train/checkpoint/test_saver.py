"""Checkpoints written and restored by the training loop (1-rank gloo group, DDP): a
preempted run resumed continues bitwise the uninterrupted trajectory on the CPU."""

from __future__ import annotations

import json
import os
import signal
import traceback
from collections.abc import Callable, Generator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ddpimg import exitcodes
from ddpimg.errors import DdpimgError
from ddpimg.runtime.context import DistContext
from ddpimg.train import run_training
from ddpimg.train.checkpoint.files import CHECKPOINTS, candidates, step_of, verify
from ddpimg.train.config import TrainConfig
from ddpimg.train.preemption import PreemptionWatch
from ddpimg.train.sharding import BatchPlan
from ddpimg.train.tasks.base import Batch
from ddpimg.train.tasks.mnist.data import ImageSet


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def trajectory(out: Path) -> list[tuple[str, int, float]]:
    """Kind, step or epoch, and loss of every train and eval line."""
    return [
        (r["kind"], r.get("step", r["epoch"]), r["loss"])
        for r in records(out)
        if r["kind"] in ("train", "eval")
    ]


def manifest(out: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return loaded


def steps(out: Path) -> list[int]:
    return [step_of(path) or 0 for path in candidates(out / CHECKPOINTS)]


@pytest.fixture
def config(make_config: Callable[..., TrainConfig], tmp_path: Path) -> TrainConfig:
    """4 steps an epoch, 3 epochs, every step logged, deterministic."""
    return make_config(
        train_samples=32, epochs=3, max_steps=0, deterministic=True, out=tmp_path / "run"
    )


def preempted(config: TrainConfig, ctx: DistContext, check_every: int) -> int:
    """Run with SIGUSR2 already received: the loop stops at its first check."""
    with PreemptionWatch(("USR2",), check_every) as watch:
        os.kill(os.getpid(), signal.SIGUSR2)
        return run_training(config, ctx, watch)


def test_preempted_run_resumes_on_the_same_trajectory(
    ctx: DistContext, config: TrainConfig, tmp_path: Path
) -> None:
    reference = replace(config, out=tmp_path / "reference")
    assert run_training(reference, ctx) == 0

    # Checks every 3 steps: the first is in the middle of epoch 1.
    assert preempted(config, ctx, check_every=3) == exitcodes.PREEMPTED
    stopped = manifest(config.out)
    assert (stopped["status"], stopped["exit_status"]) == ("preempted", 75)
    checkpoint = config.out / CHECKPOINTS / "step-00000003"
    assert stopped["preemption"] == {"cause": "SIGUSR2", "step": 3, "checkpoint": str(checkpoint)}
    assert steps(config.out) == [3]
    loop = json.loads((checkpoint / "loop.json").read_text())
    assert (loop["reason"], loop["loop"]["epoch"], loop["loop"]["index"]) == ("preempted", 1, 3)
    assert [r["kind"] for r in records(config.out)][-1] == "train"

    assert run_training(config, ctx) == 0
    assert trajectory(config.out) == trajectory(reference.out)
    final, expected = records(config.out)[-1], records(reference.out)[-1]
    assert final["kind"] == "summary"
    for key in ("steps", "epochs", "final_loss", "eval_loss", "eval_accuracy"):
        assert final[key] == expected[key], key
    resumed = manifest(config.out)
    assert resumed["status"] == "completed"
    assert resumed["resumed_from"] == {"checkpoint": str(checkpoint), "step": 3}


def test_preemption_at_the_last_step_of_an_epoch_resumes_with_its_evaluation(
    ctx: DistContext, config: TrainConfig, tmp_path: Path
) -> None:
    reference = replace(config, out=tmp_path / "reference")
    run_training(reference, ctx)
    # A check at every epoch's last step comes before the one every 100 steps.
    assert preempted(config, ctx, check_every=100) == exitcodes.PREEMPTED
    loop = json.loads((config.out / CHECKPOINTS / "step-00000004" / "loop.json").read_text())
    assert (loop["loop"]["epoch_done"], loop["reason"]) == (False, "preempted")
    run_training(config, ctx)
    assert trajectory(config.out) == trajectory(reference.out)
    # The epoch-end checkpoint of step 4 replaced the preempted one.
    loop = json.loads((config.out / CHECKPOINTS / "step-00000004" / "loop.json").read_text())
    assert loop["reason"] == "epoch"


def test_a_run_stopped_by_max_steps_is_extended_exactly(
    ctx: DistContext, config: TrainConfig, tmp_path: Path
) -> None:
    reference = replace(config, max_steps=10, out=tmp_path / "reference")
    run_training(reference, ctx)
    # Stopped in the middle of epoch 2: its evaluation and schedule step are still to come.
    run_training(replace(config, max_steps=6), ctx)
    loop = json.loads((config.out / CHECKPOINTS / "step-00000006" / "loop.json").read_text())
    assert loop["reason"] == "max_steps"
    assert (loop["loop"]["epoch"], loop["loop"]["index"], loop["loop"]["epoch_done"]) == (
        2,
        2,
        False,
    )
    # The stopped run reported an evaluation of the model so far, and its summary.
    assert [r["kind"] for r in records(config.out)][-2:] == ["eval", "summary"]
    run_training(replace(config, max_steps=10), ctx)
    assert trajectory(config.out) == trajectory(reference.out)
    assert records(config.out)[-1]["final_loss"] == records(reference.out)[-1]["final_loss"]


def test_resuming_a_finished_run_trains_nothing_and_reports_the_same(
    ctx: DistContext, config: TrainConfig
) -> None:
    run_training(config, ctx)
    before = records(config.out)
    run_training(config, ctx)
    after = records(config.out)
    assert after[:-1] == before[:-1]
    for key in ("steps", "epochs", "final_loss", "eval_loss", "eval_accuracy"):
        assert after[-1][key] == before[-1][key], key


def test_resume_from_an_earlier_checkpoint_drops_the_later_metrics(
    ctx: DistContext, config: TrainConfig
) -> None:
    run_training(config, ctx)
    first = trajectory(config.out)
    earlier = config.out / CHECKPOINTS / "step-00000004"
    run_training(replace(config, resume=str(earlier)), ctx)
    assert trajectory(config.out) == first
    assert [r["kind"] for r in records(config.out)].count("summary") == 1


def test_interval_checkpoints_keep_the_newest(ctx: DistContext, config: TrainConfig) -> None:
    run_training(replace(config, checkpoint_every=3, keep_checkpoints=2), ctx)
    assert steps(config.out) == [12, 9]
    assert all(verify(path) is None for path in candidates(config.out / CHECKPOINTS))
    assert sorted(p.name for p in (config.out / CHECKPOINTS).iterdir()) == [
        "step-00000009",
        "step-00000012",
    ]


def test_longer_run_continues_a_finished_one(
    ctx: DistContext, config: TrainConfig, tmp_path: Path
) -> None:
    reference = replace(config, out=tmp_path / "reference", epochs=4)
    run_training(reference, ctx)
    run_training(config, ctx)
    run_training(replace(config, epochs=4), ctx)
    assert trajectory(config.out) == trajectory(reference.out)


def test_resume_with_another_configuration_is_refused(
    ctx: DistContext, config: TrainConfig
) -> None:
    run_training(replace(config, epochs=1), ctx)
    with pytest.raises(DdpimgError, match=r"--seed: 1 in the checkpoint, 2 now"):
        run_training(replace(config, seed=2), ctx)


def test_a_resumed_run_loads_only_the_batches_after_its_checkpoint(
    ctx: DistContext, config: TrainConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_training(replace(config, max_steps=6), ctx)
    plans: list[tuple[int | None, int, int]] = []
    original = ImageSet.batches

    def recording(self: ImageSet, plan: BatchPlan) -> Generator[Batch]:
        if plan.epoch is not None:
            plans.append((plan.epoch, len(plan), plan.slices[0].start))
        return original(self, plan)

    monkeypatch.setattr(ImageSet, "batches", recording)
    run_training(replace(config, max_steps=10), ctx)
    # 4 steps an epoch, 8 samples a step: the checkpoint is at step 2 of epoch 2, so the
    # resumed run's first plan starts at row 16 of epoch 2's order: a seek, no replay.
    assert plans == [(2, 2, 16), (3, 2, 0)]


def open_files_on(target: str) -> int:
    """How many of this process's file descriptors point at ``target``."""
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == target)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_failed_torch_save_lets_go_of_its_file_once_released() -> None:
    """torch.save on a full disk raises with its file still open (a removed file keeps its
    blocks, and the manifest written next would not fit): releasing the error closes it."""
    import torch

    from ddpimg.train.checkpoint.saver import _release_open_files, write_failure

    before = open_files_on("/dev/full")
    with pytest.raises(RuntimeError) as caught:
        torch.save({"w": torch.zeros(100_000)}, "/dev/full")
    assert write_failure(caught.value) == "torch.save could not write a file"
    assert open_files_on("/dev/full") == before + 1
    _release_open_files(caught.value)
    assert open_files_on("/dev/full") == before


def test_a_disk_failure_inside_dcp_is_named_and_its_exception_caught() -> None:
    """DCP wraps each rank's error in a CheckpointException (a BaseException); the saver looks
    it up only once DCP is imported, and must still see the full disk inside it."""
    from torch.distributed.checkpoint.api import CheckpointException

    from ddpimg.train.checkpoint.saver import _write_errors, write_failure

    full = OSError(28, "No space left on device", "/ckpt/__0_0.distcp")
    stack = traceback.StackSummary()
    wrapped = CheckpointException("save failed", {0: (full, stack)})
    assert write_failure(wrapped) == "No space left on device: /ckpt/__0_0.distcp"
    assert write_failure(CheckpointException("peer", {1: (ValueError("x"), stack)})) is None
    assert CheckpointException in _write_errors()


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "loop.pt",
            {"scheduler": [1, 2]},
            r"loop.pt does not hold .*\(scheduler: a list, expected",
        ),
        ("loop.pt", [], r"loop.pt does not hold .*\(the file: a list, expected a dict\)"),
        ("loop.pt", {"scheduler": {"last_epoch": 1}}, r"loop.pt .*scheduler: keys differ"),
        ("rng/rank-00000.pt", {"python": "x"}, r"rank-00000.pt does not hold .*keys differ"),
        (
            "rng/rank-00000.pt",
            "swap python",
            r"rank-00000.pt does not hold .*\(python: a str, expected a sequence of 3\)",
        ),
        ("ddp/model.pt", {"model": {}, "optimizer": []}, r"model.pt .*\(optimizer: not an"),
        ("ddp/model.pt", {"model": [1]}, r"model.pt .*\['model'\], expected a dict of model"),
        ("ddp/model.pt", "x", r"model.pt .*\(str, expected a dict of model, optimizer"),
    ],
)
def test_a_checkpoint_file_of_the_wrong_kind_is_named_before_use(
    ctx: DistContext, config: TrainConfig, name: str, content: Any, message: str
) -> None:
    """loop.pt, RNG and model files holding the wrong types (tensors and plain values, so
    torch.load(weights_only=True) reads them) failed inside torch, random or the scheduler
    with a traceback. Now the resume names the file and what is wrong, exit status 2."""
    import torch

    from ddpimg.train.checkpoint.files import write_marker

    run_training(replace(config, epochs=1), ctx)
    checkpoint = candidates(config.out / CHECKPOINTS)[0]
    if content == "swap python":
        content = torch.load(checkpoint / name, weights_only=True) | {"python": "x"}
    torch.save(content, checkpoint / name)
    write_marker(checkpoint, step_of(checkpoint) or 0)  # re-signed: it verifies
    with pytest.raises(DdpimgError, match=message) as caught:
        run_training(config, ctx)
    assert exitcodes.for_error(caught.value) == exitcodes.USAGE
