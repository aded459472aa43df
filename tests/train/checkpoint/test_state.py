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
    values = fingerprint(BASE, BatchLayout(32, 2), {})
    assert not FREE_TO_CHANGE & values.keys()
    assert values["global_batch"] == 64
    assert values["lr"] == 1.0
    assert "world_size" not in values  # every strategy continues on any world size
    assert "batchnorm_samples" not in values
    task_facts = {"batchnorm_samples": 64, "vocabulary": 50257}
    assert fingerprint(BASE, BatchLayout(32, 2), task_facts).items() >= task_facts.items()


@pytest.mark.parametrize(
    "changes",
    [
        {"epochs": 30, "max_steps": 100, "out": Path("elsewhere"), "log_every": 1},
        {"checkpoint_every": 5, "keep_checkpoints": 1, "resume": "none", "deterministic": True},
        {"preempt_signals": ("TERM",), "preempt_check_every": 1, "eval_samples": 10},
        # The same global batch from per-rank batches.
        {"global_batch_size": None, "batch_size": 32},
        # Compiled in place: the same state dicts (tests/integration/test_compile.py).
        {"compile": True, "compile_backend": "aot_eager"},
    ],
)
def test_options_that_may_change_keep_the_fingerprint(changes: dict[str, Any]) -> None:
    saved = fingerprint(BASE, BatchLayout(32, 2), {})
    current = fingerprint(replace(BASE, **changes), BatchLayout(32, 2), {})
    check_fingerprint(saved, current, Path("ck"))


@pytest.mark.parametrize(
    ("changes", "batch", "message"),
    [
        ({"lr": 0.5}, BatchLayout(32, 2), r"--lr: 1.0 in the checkpoint, 0.5 now"),
        ({"seed": 8}, BatchLayout(32, 2), r"--seed: 7 in the checkpoint, 8 now"),
        ({"strategy": "deepspeed"}, BatchLayout(32, 2), r"--strategy: 'ddp' in the checkpoint"),
        ({}, BatchLayout(64, 2), r"the global batch \(--batch-size x world size, or "),
    ],
)
def test_a_different_configuration_is_named(
    changes: dict[str, Any], batch: BatchLayout, message: str
) -> None:
    saved = fingerprint(BASE, BatchLayout(32, 2), {})
    current = fingerprint(replace(BASE, **changes), batch, {})
    with pytest.raises(
        DdpimgError, match=r"checkpoint ck belongs to another configuration; "
    ) as err:
        check_fingerprint(saved, current, Path("ck"))
    assert err.match(message)
    assert err.match(r"hint: resume with the checkpoint's options, start over with --resume")


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "deepspeed"])
def test_every_strategy_continues_on_another_world_size(strategy: str) -> None:
    """The world size is no part of a run: 2 ranks of 32 and 4 of 16 (or 1 of 8 micro-
    batches of 8) give one fingerprint, and a checkpoint of the first continues on the
    others (DeepSpeed's through its universal form)."""
    config = replace(BASE, strategy=strategy)
    saved = fingerprint(config, BatchLayout(32, 2), {})
    for batch in (BatchLayout(16, 4), BatchLayout(64, 1, 8)):
        check_fingerprint(saved, fingerprint(config, batch, {}), Path("ck"))


def test_a_checkpoint_that_recorded_its_world_size_continues_on_another() -> None:
    """Checkpoints of DeepSpeed runs written before resharding recorded the world size in
    their fingerprint; a key only they know is not compared."""
    saved = fingerprint(replace(BASE, strategy="deepspeed"), BatchLayout(32, 2), {})
    current = fingerprint(replace(BASE, strategy="deepspeed"), BatchLayout(64, 1), {})
    check_fingerprint(saved | {"world_size": 2}, current, Path("ck"))


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
        FLAT_COMMON | FLAT_OPTIONS | flat | {"trainer": trainer, "global_batch": global_batch}
    )
    assert fingerprint(config, BatchLayout.of(config, 4), {}) == expected


def test_another_vocabulary_is_named() -> None:
    saved = fingerprint(BASE, BatchLayout(32, 2), {"vocabulary": 50257})
    current = fingerprint(BASE, BatchLayout(32, 2), {"vocabulary": 50300})
    message = (
        r"the model's vocabulary \(the data's tokenizer's, or --init-from's\): 50257 in the "
        r"checkpoint, 50300 now"
    )
    with pytest.raises(DdpimgError, match=message):
        check_fingerprint(saved, current, Path("ck"))
    # A checkpoint from before the vocabulary was recorded continues.
    check_fingerprint(fingerprint(BASE, BatchLayout(32, 2), {}), current, Path("ck"))


def test_the_micro_batch_may_change_but_what_batchnorm_normalises_over_may_not() -> None:
    """Accumulation changes no trajectory of a model without BatchNorm; with BatchNorm the
    samples of one forward pass are its statistics, so a changed number is named."""
    micro = replace(BASE, micro_batch_size=8)
    check_fingerprint(
        fingerprint(BASE, BatchLayout(32, 2), {}),
        fingerprint(micro, BatchLayout(64, 1, 8), {}),
        Path("ck"),
    )
    saved = fingerprint(BASE, BatchLayout(32, 2), {"batchnorm_samples": 64})
    current = fingerprint(micro, BatchLayout(64, 1, 8), {"batchnorm_samples": 8})
    message = (
        r"checkpoint ck belongs to another configuration; the samples BatchNorm normalises "
        r"over in one forward pass \(--micro-batch-size x world size; --micro-batch-size alone "
        r"with --no-sync-batchnorm\): 64 in the checkpoint, 8 now\n"
        r"  hint: give a --micro-batch-size that makes 64 samples a forward pass on this world "
        r"size, or start over with --resume none; a model trained with --no-sync-batchnorm "
        r"continues on any world size with the same --micro-batch-size"
    )
    with pytest.raises(DdpimgError, match=message):
        check_fingerprint(saved, current, Path("ck"))
