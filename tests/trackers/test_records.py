from __future__ import annotations

import math

from ddpimg.trackers.records import MAX_PARAMETER_CHARS, Scalars, description, parameters, scalars


def test_train_record_becomes_named_scalars_at_its_step() -> None:
    record = {"kind": "train", "epoch": 1, "step": 20, "loss": 0.5, "lr": 0.1, "flag": True}
    assert scalars(record) == Scalars(20, {"train/epoch": 1.0, "train/loss": 0.5, "train/lr": 0.1})


def test_summary_is_placed_at_its_steps_and_drops_non_numbers() -> None:
    record = {"kind": "summary", "steps": 40, "final_loss": 0.2, "note": "x", "mfu": None}
    assert scalars(record) == Scalars(40, {"summary/steps": 40.0, "summary/final_loss": 0.2})


def test_record_without_a_step_and_non_finite_values() -> None:
    record = {"kind": "eval", "epoch": 2, "loss": math.nan, "accuracy": 0.9}
    assert scalars(record) == Scalars(None, {"eval/epoch": 2.0, "eval/accuracy": 0.9})


def test_parameters_flatten_the_manifest_without_its_end() -> None:
    manifest = {
        "status": "running",
        "exit_status": None,
        "seed": 7,
        "versions": {"torch": "2.14.1", "image": {"flavour": "cpu"}, "cuda": None},
        "distributed": {"world_size": 2},
        "arguments": {"preempt_signals": ["USR2", "TERM"], "out": "x" * 7000},
    }
    params = parameters(description(manifest))
    assert params == {
        "seed": "7",
        "versions.torch": "2.14.1",
        "versions.image.flavour": "cpu",
        "distributed.world_size": "2",
        "arguments.preempt_signals": '["USR2", "TERM"]',
        "arguments.out": "x" * MAX_PARAMETER_CHARS,
    }
