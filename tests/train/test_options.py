"""A trainer's options dataclass: the flags, their checks and manifest.json's arguments
derived from its fields."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import Any

import pytest

from ddpimg.cli.train_options import add_training_arguments
from ddpimg.errors import DdpimgError
from ddpimg.train.config import TrainConfig
from ddpimg.train.options import TrainerOptions, option, option_fields
from ddpimg.train.tasks import (
    FREE_TO_CHANGE_OPTIONS,
    TRAINER_OPTIONS,
    TRAINERS,
    arguments_json,
    trainer_for,
    trainer_options,
)
from ddpimg.train.tasks.gpt import GptOptions
from ddpimg.train.tasks.resnet import ResnetOptions
from ddpimg.train.tasks.toy import ToyOptions


@dataclass(frozen=True)
class Options(TrainerOptions):
    """A trainer's options as a trainer declares them."""

    depth: int | None = option("layers", default="4", metavar="N", minimum=1, hint="one or more")
    mode: str | None = option("how", default="fast", choices=("fast", "slow"))
    fused: bool | None = option("fuse kernels", default="on")
    cache_dir: str | None = option("scratch", default="none", free_to_change=True)

    def check(self) -> None:
        if self.mode == "slow" and self.fused:
            raise DdpimgError("--fused needs --mode fast", hint="drop --fused")


def test_each_field_is_a_flag() -> None:
    declared = option_fields(Options)
    assert [(item.name, item.option, item.kind) for item in declared] == [
        ("depth", "--depth", int),
        ("mode", "--mode", str),
        ("fused", "--fused", bool),
        ("cache_dir", "--cache-dir", str),
    ]
    assert declared[0].flag.metavar == "N"
    assert declared[1].flag.choices == ("fast", "slow")
    assert [item.flag.free_to_change for item in declared] == [False, False, False, True]


def test_a_flag_left_out_is_none() -> None:
    assert Options() == Options(depth=None, mode=None, fused=None, cache_dir=None)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"depth": 0}, r"^--depth must be at least 1, got 0\n  hint: one or more$"),
        ({"mode": "warp"}, r"^--mode must be one of fast, slow, got 'warp'\n  hint: pick one of"),
        ({"mode": "slow", "fused": True}, r"^--fused needs --mode fast\n  hint: drop --fused$"),
    ],
)
def test_values_are_checked_on_construction(values: dict[str, Any], message: str) -> None:
    with pytest.raises(DdpimgError, match=message):
        Options(**values)


@pytest.mark.parametrize("values", [{"depth": "2"}, {"depth": True}, {"fused": 1}])
def test_a_value_of_another_type_is_refused(values: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match=r"is not a (int|bool)"):
        Options(**values)


def test_a_field_without_option_is_refused() -> None:
    @dataclass(frozen=True)
    class Undeclared(TrainerOptions):
        depth: int | None = None

    @dataclass(frozen=True)
    class Listed(TrainerOptions):
        layers: tuple[int, ...] | None = option("sizes", default="none")

    for options in (Undeclared, Listed):
        with pytest.raises(TypeError, match=r"declare it as `bool \| None`, `int \| None`"):
            option_fields(options)


def test_of_gives_the_trainers_options() -> None:
    options = ResnetOptions(arch="resnet18")
    assert ResnetOptions.of(TrainConfig(trainer="resnet", options=options)) is options
    # A config made without the trainer's options: none of its flags given.
    assert ResnetOptions.of(TrainConfig(trainer="resnet")) == ResnetOptions()
    with pytest.raises(TypeError, match=r"GptOptions given where ResnetOptions is expected"):
        ResnetOptions.of(TrainConfig(trainer="gpt", options=GptOptions()))


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_the_command_line_has_every_option_of_every_trainer(trainer: str) -> None:
    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    actions = {action.dest: action for action in parser._actions}
    group = next((g for g in parser._action_groups if g.title == trainer), None)
    declared = option_fields(TRAINERS[trainer].options)
    assert (group is None) == (not declared)
    for item in declared:
        action = actions[item.name]
        assert action in (group._group_actions if group else [])
        assert action.option_strings[0] == item.option
        assert action.default is None
        assert action.help == f"{item.flag.help} (default: {item.flag.default})"
        if item.kind is bool:
            assert isinstance(action, argparse.BooleanOptionalAction)
        else:
            assert action.choices == item.flag.choices
            assert action.metavar == item.flag.metavar
            assert action.type is (None if item.kind is str else item.kind)


def test_options_are_built_from_the_given_flags() -> None:
    values = vars(parsed("resnet", "--arch", "resnet18", "--no-sync-batchnorm"))
    assert trainer_options("resnet", values) == ResnetOptions(arch="resnet18", sync_batchnorm=False)
    assert trainer_options("mnist", vars(parsed())) == TrainerOptions()
    with pytest.raises(DdpimgError, match=r"^--arch applies to the resnet trainer only, got "):
        trainer_options("gpt", values)


def test_another_trainers_options_are_refused() -> None:
    config = TrainConfig(trainer="resnet", options=GptOptions(seq_len=8))
    with pytest.raises(
        DdpimgError,
        match=r"^--seq-len applies to the gpt trainer only, got trainer resnet\n"
        r"  hint: drop --seq-len, or run `train gpt`$",
    ):
        trainer_for(config)
    with pytest.raises(DdpimgError, match=r"^the toy trainer's options given to trainer gpt\n"):
        trainer_for(TrainConfig(trainer="gpt", options=ToyOptions()))


def test_option_names_are_one_trainers_and_no_common_fields() -> None:
    common = {item.name for item in fields(TrainConfig)}
    assert len(set(TRAINER_OPTIONS)) == len(TRAINER_OPTIONS)
    assert not common & set(TRAINER_OPTIONS)


def test_the_options_that_may_change_on_resume_are_declared() -> None:
    assert {"workers", "bad_samples", "eval_data", "init_from"} == FREE_TO_CHANGE_OPTIONS


# manifest.json's arguments as ddpimg wrote them while TrainConfig held every trainer's
# options as flat fields: an earlier run's manifest is compared with them (``--resume``).
FLAT_KEYS = {
    "trainer", "strategy", "epochs", "max_steps", "batch_size", "global_batch_size",
    "micro_batch_size", "data", "train_samples", "eval_samples", "out", "seed", "deterministic",
    "log_every", "precision",
    "zero_stage", "lr", "gamma", "warmup_steps", "arch", "image_size", "sync_batchnorm",
    "workers", "bad_samples", "size", "seq_len", "eval_data", "init_from", "gpus_per_replica",
    "checkpoint_every", "keep_checkpoints", "resume", "preempt_signals", "preempt_check_every",
    "log_to", "project", "run_name", "run_group", "wandb_entity", "profile_steps",
    "memory_snapshot", "compile", "compile_backend",
}  # fmt: skip


@pytest.mark.parametrize(
    ("trainer", "options", "given"),
    [
        ("mnist", TrainerOptions(), {}),
        ("toy", ToyOptions(gpus_per_replica=1), {"gpus_per_replica": 1}),
        (
            "resnet",
            ResnetOptions(workers=0, bad_samples="skip"),
            {"workers": 0, "bad_samples": "skip"},
        ),
        ("gpt", GptOptions(size="tiny", eval_data="/v"), {"size": "tiny", "eval_data": "/v"}),
    ],
)
def test_arguments_are_flat_with_every_trainers_options(
    trainer: str, options: TrainerOptions, given: dict[str, Any]
) -> None:
    arguments = arguments_json(TrainConfig(trainer=trainer, options=options))
    assert arguments.keys() == FLAT_KEYS
    assert {name: value for name, value in arguments.items() if name in TRAINER_OPTIONS} == (
        dict.fromkeys(TRAINER_OPTIONS) | given
    )
    assert (arguments["trainer"], arguments["out"], arguments["log_to"]) == (
        trainer,
        "runs",
        [],
    )
