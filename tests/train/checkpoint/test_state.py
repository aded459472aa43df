"""What a checkpoint holds besides the model: loop position, fingerprint, RNG states."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch

from ddpimg.errors import DdpimgError
from ddpimg.train.batch import BatchLayout
from ddpimg.train.checkpoint.state import (
    FREE_TO_CHANGE,
    CheckpointRecord,
    LoopState,
    capture_rng,
    check_fingerprint,
    fingerprint,
    restore_rng,
)
from ddpimg.train.config import TrainConfig
from ddpimg.train.options import TrainerOptions
from ddpimg.train.tasks.gpt import GptOptions
from ddpimg.train.tasks.resnet import ResnetOptions
from ddpimg.train.tasks.toy import ToyOptions

BASE = TrainConfig(global_batch_size=64, batch_size=None, lr=1.0, seed=7)


def test_fingerprint_leaves_out_what_may_change_and_adds_the_global_batch() -> None:
    values = fingerprint(BASE, BatchLayout(32, 2), reshards=True)
    assert not FREE_TO_CHANGE & values.keys()
    assert values["global_batch"] == 64
    assert values["lr"] == 1.0
    assert "world_size" not in values
    assert fingerprint(BASE, BatchLayout(32, 2), reshards=False)["world_size"] == 2


@pytest.mark.parametrize(
    "changes",
    [
        {"epochs": 30, "max_steps": 100, "out": Path("elsewhere"), "log_every": 1},
        {"checkpoint_every": 5, "keep_checkpoints": 1, "resume": "none", "deterministic": True},
        {"preempt_signals": ("TERM",), "preempt_check_every": 1, "eval_samples": 10},
        # The same global batch from per-rank batches.
        {"global_batch_size": None, "batch_size": 32},
    ],
)
def test_options_that_may_change_keep_the_fingerprint(changes: dict[str, Any]) -> None:
    saved = fingerprint(BASE, BatchLayout(32, 2), reshards=True)
    current = fingerprint(replace(BASE, **changes), BatchLayout(32, 2), True)
    check_fingerprint(saved, current, Path("ck"))


@pytest.mark.parametrize(
    ("changes", "batch", "reshards", "message"),
    [
        ({"lr": 0.5}, BatchLayout(32, 2), True, r"--lr: 1.0 in the checkpoint, 0.5 now"),
        ({"seed": 8}, BatchLayout(32, 2), True, r"--seed: 7 in the checkpoint, 8 now"),
        (
            {"strategy": "deepspeed"},
            BatchLayout(32, 2),
            True,
            r"--strategy: 'ddp' in the checkpoint",
        ),
        ({}, BatchLayout(64, 2), True, r"the global batch \(--batch-size x world size, or "),
        (
            {"strategy": "deepspeed"},
            BatchLayout(16, 4),
            False,
            r"the world size \(deepspeed checkpoints are partitioned by rank and load only at "
            r"the world size that wrote them: no resharding\): 2 in the checkpoint, 4 now",
        ),
    ],
)
def test_a_different_configuration_is_named(
    changes: dict[str, Any], batch: BatchLayout, reshards: bool, message: str
) -> None:
    saved_config = replace(BASE, **changes) if not reshards else BASE
    saved = fingerprint(saved_config, BatchLayout(32, 2), reshards)
    current = fingerprint(replace(BASE, **changes), batch, reshards)
    with pytest.raises(
        DdpimgError, match=r"checkpoint ck belongs to another configuration; "
    ) as err:
        check_fingerprint(saved, current, Path("ck"))
    assert err.match(message)
    if reshards:
        assert err.match(r"hint: resume with the checkpoint's options, start over with --resume")
    else:
        assert err.match(r"hint: resume on 2 ranks, as many as wrote it, or start over with ")
        assert err.match(r"DDP and FSDP checkpoints continue on any number of ranks")


def test_keys_known_to_one_side_only_are_not_compared() -> None:
    check_fingerprint({"lr": 1.0, "old_flag": 3}, {"lr": 1.0, "new_flag": 4}, Path("ck"))


def record(**loop: Any) -> CheckpointRecord:
    return CheckpointRecord(
        loop=LoopState(**loop),
        world_size=2,
        global_batch=64,
        strategy="ddp",
        fingerprint={"lr": 1.0},
        metrics_lines=12,
        reason="preempted",
        saved_utc="2024-06-01T00:00:00Z",
    )


def test_record_survives_json_with_nan_losses() -> None:
    original = record(step=12, epoch=2, index=4, epoch_done=False, last_loss=0.5)
    again = CheckpointRecord.from_json(json.loads(json.dumps(original.to_json())), Path("ck"))
    assert again.loop.step == 12
    assert again.loop.epoch_done is False
    assert math.isnan(again.loop.eval_loss)
    assert replace(again, loop=original.loop) == original


def test_fresh_state_is_before_the_first_epoch() -> None:
    fresh = LoopState()
    assert (fresh.step, fresh.epoch, fresh.index, fresh.epoch_done) == (0, 0, 0, True)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda data: [], r"is not a JSON object with a 'loop' object"),
        (lambda data: data | {"loop": 3}, r"is not a JSON object with a 'loop' object"),
        (lambda data: {k: v for k, v in data.items() if k != "world_size"}, r"lacks keys"),
        (lambda data: data | {"extra": 1}, r"lacks keys or has unknown ones"),
        (
            lambda data: data | {"loop": data["loop"] | {"step": "12"}},
            r"has step='12', expected int",
        ),
        (lambda data: data | {"loop": data["loop"] | {"epoch_done": 1}}, r"has epoch_done=1"),
        (lambda data: data | {"loop": data["loop"] | {"step": True}}, r"has step=True"),
        (lambda data: data | {"reason": None}, r"has reason=None, expected str"),
        # Values of the right type out of range (issue 47: step -5 was accepted).
        (
            lambda data: data | {"loop": data["loop"] | {"step": -5}},
            r"has step=-5, expected a whole number from 0 below 2\*\*63",
        ),
        (lambda data: data | {"world_size": 0}, r"has world_size=0, expected a whole number"),
        (lambda data: data | {"global_batch": -64}, r"has global_batch=-64"),
        (lambda data: data | {"metrics_lines": 2**63}, r"has metrics_lines=9223372036854775808"),
        (
            lambda data: data | {"loop": data["loop"] | {"index": 13}},
            r"has index=13 in its epoch but step=12 in all",
        ),
        (
            lambda data: data | {"loop": data["loop"] | {"elapsed_s": float("inf")}},
            r"has elapsed_s=inf, expected seconds from 0",
        ),
        (lambda data: data | {"loop": data["loop"] | {"excluded_s": -1.0}}, r"excluded_s=-1.0"),
    ],
)
def test_malformed_loop_json_is_named(edit: Any, message: str) -> None:
    data = json.loads(json.dumps(record(step=12).to_json()))
    with pytest.raises(DdpimgError, match=r"checkpoint ck: loop.json ") as err:
        CheckpointRecord.from_json(edit(data), Path("ck"))
    assert err.match(message)
    assert err.match(r"hint: it was written by another ddpimg version")


def test_a_step_other_than_the_checkpoints_name_is_named() -> None:
    data = json.loads(json.dumps(record(step=12).to_json()))
    with pytest.raises(DdpimgError, match=r"has step=12, but the checkpoint's name says step 5"):
        CheckpointRecord.from_json(data, Path("run/checkpoints/step-00000005"))
    CheckpointRecord.from_json(data, Path("run/checkpoints/step-00000012"))


def draws() -> tuple[list[float], float, list[float]]:
    return (torch.rand(3).tolist(), random.random(), numpy.random.rand(3).tolist())


def test_rng_states_are_restored() -> None:
    state = capture_rng()
    first = draws()
    assert draws() != first
    restore_rng(through_torch_save(state))
    assert draws() == first


def through_torch_save(state: dict[str, Any]) -> dict[str, Any]:
    """The state as ``torch.load(weights_only=True)`` gives it back."""
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded: dict[str, Any] = torch.load(buffer, weights_only=True)
    return loaded


# The fingerprint as ddpimg wrote it while TrainConfig held every trainer's options as flat
# fields (before the trainers' options dataclasses): every trainer's options that decide the
# trajectory, None but the run's trainer's. A checkpoint of that version must still resume.
FLAT_COMMON = {
    "strategy": "ddp",
    "data": "synthetic",
    "train_samples": None,
    "seed": 1,
    "precision": "auto",
    "zero_stage": 0,
    "lr": None,
    "gamma": None,
    "log_to": [],
    "project": None,
    "run_name": None,
    "run_group": None,
    "wandb_entity": None,
    "profile_steps": None,
    "memory_snapshot": False,
}
FLAT_OPTIONS = dict.fromkeys(
    ("arch", "image_size", "sync_batchnorm", "size", "seq_len", "gpus_per_replica")
)


@pytest.mark.parametrize(
    ("trainer", "options", "global_batch", "flat"),
    [
        ("mnist", TrainerOptions(), 256, {}),
        ("toy", ToyOptions(gpus_per_replica=1), 256, {"gpus_per_replica": 1}),
        (
            "resnet",
            ResnetOptions(
                arch="resnet18",
                image_size=64,
                sync_batchnorm=False,
                workers=3,
                bad_samples="skip",
            ),
            128,
            {"arch": "resnet18", "image_size": 64, "sync_batchnorm": False},
        ),
        ("resnet", ResnetOptions(), 128, {}),
        (
            "gpt",
            GptOptions(size="tiny", seq_len=32, eval_data="/x/val"),
            32,
            {"size": "tiny", "seq_len": 32},
        ),
        ("gpt", GptOptions(init_from="/hf"), 32, {}),
    ],
)
def test_the_fingerprint_is_the_flat_configs(
    trainer: str, options: TrainerOptions, global_batch: int, flat: dict[str, Any]
) -> None:
    config = TrainConfig(trainer=trainer, options=options, batch_size=global_batch // 4)
    expected = (
        FLAT_COMMON
        | FLAT_OPTIONS
        | flat
        | {"trainer": trainer, "global_batch": global_batch, "world_size": 4}
    )
    assert fingerprint(config, BatchLayout.of(config, 4), reshards=False) == expected
