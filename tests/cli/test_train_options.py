from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddpimg.cli.train_options import add_training_arguments, train_config
from ddpimg.errors import DdpimgError
from ddpimg.train.batch import BatchLayout
from ddpimg.train.config import TrainConfig
from ddpimg.train.strategies import strategy_for
from ddpimg.train.tasks import TRAINERS, trainer_for
from ddpimg.train.tasks.gpt import SIZES


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    return parser


def parse(*argv: str) -> TrainConfig:
    return train_config(parser().parse_args(list(argv)))


def test_defaults_are_the_tutorials() -> None:
    config = parse()
    assert config == TrainConfig(
        trainer="mnist",
        strategy="ddp",
        epochs=14,
        max_steps=0,
        batch_size=64,
        global_batch_size=None,
        data="synthetic",
        out=Path("runs"),  # the runs root: the run takes a directory of its own there
        seed=1,
        log_every=10,
        precision="auto",
        zero_stage=0,
        lr=None,
        gamma=None,
        warmup_steps=10,
    )


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["mnist"], "trainer", "mnist"),
        (["--strategy", "deepspeed"], "strategy", "deepspeed"),
        (["--strategy", "deepspeed", "--zero-stage", "3"], "zero_stage", 3),
        (["--epochs", "2"], "epochs", 2),
        (["--max-steps", "7"], "max_steps", 7),
        (["--batch-size", "16"], "batch_size", 16),
        (["--global-batch-size", "128"], "global_batch_size", 128),
        (["--global-batch-size", "128"], "batch_size", None),
        (["--data", "/data/mnist"], "data", "/data/mnist"),
        (["--train-samples", "100"], "train_samples", 100),
        (["--eval-samples", "10"], "eval_samples", 10),
        (["--eval-samples", "all"], "eval_samples", "all"),
        ([], "eval_samples", None),
        (["--out", "runs/a"], "out", Path("runs/a")),
        (["--seed", "0"], "seed", 0),
        (["--deterministic"], "deterministic", True),
        (["--log-every", "1"], "log_every", 1),
        (["--precision", "bf16"], "precision", "bf16"),
        (["--lr", "0.5"], "lr", 0.5),
        (["--gamma", "1"], "gamma", 1.0),
        (["--warmup-steps", "0"], "warmup_steps", 0),
        (["--precision", "fp32"], "precision", "fp32"),
        (["--compile"], "compile", True),
        (["--compile", "--compile-backend", "aot_eager"], "compile_backend", "aot_eager"),
        (["--compile"], "compile_backend", None),
    ],
)
def test_flag_sets_field(argv: list[str], field: str, value: object) -> None:
    assert getattr(parse(*argv), field) == value


@pytest.mark.parametrize(
    ("argv", "env", "out"),
    [
        ([], {}, "runs"),
        ([], {"DDPIMG_RUNS": "/scratch/me/runs"}, "/scratch/me/runs"),
        (["--out", "mine"], {"DDPIMG_RUNS": "/scratch/me/runs"}, "mine"),
    ],
    ids=["default", "variable", "flag"],
)
def test_without_out_the_run_goes_under_the_runs_root(
    argv: list[str], env: dict[str, str], out: str
) -> None:
    """Precedence: --out > DDPIMG_RUNS (the user's, else the site profile's [env], both in
    the environment the run gets) > ./runs; the run's own directory is chosen at start."""
    assert train_config(parser().parse_args(argv), env).out == Path(out)


def test_an_empty_runs_variable_is_an_error() -> None:
    with pytest.raises(DdpimgError, match=r"DDPIMG_RUNS is set but empty\n  hint: unset it"):
        train_config(parser().parse_args([]), {"DDPIMG_RUNS": " "})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--epochs", "0"], r"--epochs must be at least 1, got 0\n  hint: one epoch"),
        (["--max-steps", "-1"], r"--max-steps must be at least 0, got -1\n  hint: 0 means no"),
        (["--batch-size", "0"], r"--batch-size must be at least 1, got 0"),
        (["--global-batch-size", "0"], r"--global-batch-size must be at least 1, got 0"),
        (["--train-samples", "0"], r"--train-samples must be at least 1, got 0"),
        (["--eval-samples", "-5"], r"--eval-samples must be at least 1, got -5"),
        (["--seed", "-1"], r"--seed must be at least 0, got -1"),
        (["--seed", str(2**63)], r"--seed must be below 2\*\*63, got 9223372036854775808"),
        (["--log-every", "0"], r"--log-every must be at least 1, got 0"),
        (["--lr", "0"], r"--lr must be a positive number, got 0.0"),
        (["--lr", "nan"], r"--lr must be a positive number, got nan"),
        (["--lr", "inf"], r"--lr must be a positive number, got inf"),
        (["--gamma", "0"], r"--gamma must be in \(0, 1\], got 0.0"),
        (["--gamma", "1.5"], r"--gamma must be in \(0, 1\], got 1.5"),
        (["--data", ""], r"--data is empty\n  hint: give 'synthetic', or the dataset's path"),
        (
            ["--zero-stage", "1"],
            r"--zero-stage 1 applies to --strategy deepspeed only, got --strategy ddp\n"
            r"  hint: drop --zero-stage, or add --strategy deepspeed",
        ),
        (["--zero-stage", "0"], r"--zero-stage 0 applies to --strategy deepspeed only"),
        (
            ["--strategy", "deepspeed", "--zero-stage", "4"],
            r"--zero-stage must be one of 0, 1, 2, 3, got 4",
        ),
        (
            ["--compile-backend", "eager"],
            r"--compile-backend eager was given without --compile\n  hint: add --compile",
        ),
    ],
)
def test_invalid_value_names_flag_and_value(argv: list[str], message: str) -> None:
    with pytest.raises(DdpimgError, match=message):
        parse(*argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["--batch-size", "8", "--global-batch-size", "16"],
        ["resnet50"],
        ["--strategy", "horovod"],
        ["--precision", "fp8"],
        ["--compile", "--compile-backend", "cudagraphs"],
        ["--eval-samples", "most"],
    ],
)
def test_parser_rejects(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_eval_samples_takes_a_number_or_all(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--eval-samples", "1e3")
    assert "--eval-samples: expected a whole number or all, got '1e3'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("eval_samples", "available", "short", "count"),
    [
        (None, 10_000, True, 1024),  # a smoke run: at most 1,024
        (None, 500, True, 500),  # a set smaller than that: all of it
        (None, 10_000, False, 10_000),  # a run that ends an epoch: the whole set
        ("all", 10_000, True, 10_000),  # --eval-samples all: the whole set, short or not
        (64, 64, True, 64),  # --eval-samples N: the trainer loaded the first N, all taken
        (2000, 2000, True, 2000),
    ],
)
def test_a_short_run_evaluates_at_most_1024_samples_by_default(
    eval_samples: int | str | None, available: int, short: bool, count: int
) -> None:
    config = TrainConfig(eval_samples=eval_samples)
    assert config.eval_count(available, short=short) == count
    assert config.first_eval_samples == (eval_samples if isinstance(eval_samples, int) else None)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"batch_size": None, "global_batch_size": None},
            r"give exactly one of --batch-size and --global-batch-size, got --batch-size None",
        ),
        ({"batch_size": 8, "global_batch_size": 16}, r"got --batch-size 8 and --global-batch"),
        ({"precision": "fp8"}, r"--precision must be one of auto, fp32, bf16, fp16, got 'fp8'"),
        ({"zero_stage": 2}, r"--zero-stage 2 applies to --strategy deepspeed only"),
        ({"eval_samples": "most"}, r"--eval-samples must be one of all, got 'most'"),
        ({"eval_samples": 0}, r"--eval-samples must be at least 1, got 0\n  hint: all takes"),
        (
            {"compile": True, "compile_backend": "tvm"},
            r"--compile-backend must be one of inductor, aot_eager, eager, got 'tvm'",
        ),
    ],
)
def test_config_validates_on_construction(config: dict[str, object], message: str) -> None:
    with pytest.raises(DdpimgError, match=message):
        TrainConfig(**config)  # type: ignore[arg-type]


def test_unknown_trainer_is_named() -> None:
    with pytest.raises(
        DdpimgError, match=r"trainer must be one of gpt, mnist, resnet, toy, got 'gpt2'"
    ):
        trainer_for(TrainConfig(trainer="gpt2"))


def test_unknown_strategy_is_named() -> None:
    with pytest.raises(
        DdpimgError, match=r"--strategy must be one of ddp, deepspeed, fsdp, got 'horovod'"
    ):
        strategy_for(TrainConfig(strategy="horovod"))


def test_to_json_is_json() -> None:
    config = parse("--out", "runs/x", "--global-batch-size", "32")
    restored = json.loads(json.dumps(config.to_json()))
    assert restored["out"] == "runs/x"
    assert restored["global_batch_size"] == 32
    assert restored["batch_size"] is None


def test_building_the_parser_does_not_import_torch() -> None:
    code = (
        "import argparse, sys\n"
        "import ddpimg.train\n"
        "from ddpimg.cli.train_options import add_training_arguments, train_config\n"
        "p = argparse.ArgumentParser(); add_training_arguments(p)\n"
        "train_config(p.parse_args(['--strategy', 'deepspeed']))\n"
        "print(sorted(m for m in ('torch', 'deepspeed') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["resnet", "--arch", "vit_b_16"], "arch", "vit_b_16"),
        (["resnet", "--image-size", "64"], "image_size", 64),
        (["resnet", "--no-sync-batchnorm"], "sync_batchnorm", False),
        (["resnet", "--sync-batchnorm"], "sync_batchnorm", True),
        (["resnet"], "sync_batchnorm", None),
        (["gpt", "--size", "tiny"], "size", "tiny"),
        (["gpt", "--seq-len", "128"], "seq_len", 128),
        (["toy", "--gpus-per-replica", "1"], "gpus_per_replica", 1),
        (["resnet", "--workers", "3"], "workers", 3),
        (["resnet", "--workers", "0"], "workers", 0),
        (["resnet"], "workers", None),
        (["resnet", "--bad-samples", "skip"], "bad_samples", "skip"),
    ],
)
def test_trainer_flag_sets_option(argv: list[str], field: str, value: object) -> None:
    config = parse(*argv)
    assert type(config.options) is TRAINERS[config.trainer].options
    assert getattr(config.options, field) == value


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--arch", "resnet18"],
            r"--arch applies to the resnet trainer only, got trainer mnist\n"
            r"  hint: drop --arch, or run `train resnet`",
        ),
        (["gpt", "--image-size", "64"], r"--image-size applies to the resnet trainer only, got "),
        (["toy", "--no-sync-batchnorm"], r"--sync-batchnorm applies to the resnet trainer only"),
        (["resnet", "--size", "tiny"], r"--size applies to the gpt trainer only, got trainer res"),
        (["mnist", "--seq-len", "8"], r"--seq-len applies to the gpt trainer only"),
        (["gpt", "--gpus-per-replica", "2"], r"--gpus-per-replica applies to the toy trainer only"),
        (["toy", "--data", "/data"], r"the toy trainer has only a synthetic dataset, got --data /"),
        (["toy", "--gpus-per-replica", "3"], r"--gpus-per-replica must be 1 or 2, got 3\n.*two"),
        (["toy", "--gpus-per-replica", "0"], r"--gpus-per-replica must be 1 or 2, got 0"),
        (["resnet", "--image-size", "16"], r"--image-size must be at least 32, got 16"),
        (["gpt", "--seq-len", "0"], r"--seq-len must be at least 1, got 0"),
        (["resnet", "--workers", "-1"], r"--workers must be at least 0, got -1\n  hint: 0 loads"),
        (["mnist", "--workers", "2"], r"--workers applies to the resnet trainer only"),
        (["gpt", "--bad-samples", "skip"], r"--bad-samples applies to the resnet trainer only"),
        (["--warmup-steps", "-1"], r"--warmup-steps must be at least 0, got -1"),
    ],
)
def test_trainer_flag_errors(argv: list[str], message: str) -> None:
    with pytest.raises(DdpimgError, match=message):
        parse(*argv)


def test_unknown_gpt_size_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("gpt", "--size", "huge")
    assert "invalid choice: 'huge'" in capsys.readouterr().err


def test_gpt_sizes_are_the_models() -> None:
    size = next(action for action in parser()._actions if action.dest == "size")
    assert set(size.choices or ()) == set(SIZES)


@pytest.mark.parametrize(
    ("trainer", "per_rank"), [("mnist", 64), ("toy", 64), ("resnet", 32), ("gpt", 8)]
)
def test_default_batch_is_the_trainers(trainer: str, per_rank: int) -> None:
    assert BatchLayout.of(parse(trainer), 4).per_rank == per_rank


@pytest.mark.parametrize(
    ("argv", "devices"),
    [([], 1), (["toy"], 2), (["toy", "--gpus-per-replica", "1"], 1), (["gpt"], 1)],
)
def test_devices_per_rank(argv: list[str], devices: int) -> None:
    config = parse(*argv)
    assert TRAINERS[config.trainer].devices_per_rank(config) == devices


@pytest.mark.parametrize(
    ("argv", "device_type", "precision"),
    [
        (["resnet"], "cuda", "bf16"),
        (["gpt"], "cuda", "bf16"),
        (["gpt"], "cpu", "fp32"),
        (["mnist"], "cuda", "fp32"),
        (["toy"], "cuda", "fp32"),
        (["gpt", "--precision", "fp32"], "cuda", "fp32"),
        (["mnist", "--precision", "bf16"], "cpu", "bf16"),
    ],
)
def test_auto_precision_is_decided_per_device(
    argv: list[str], device_type: str, precision: str
) -> None:
    config = parse(*argv)
    auto = TRAINERS[config.trainer].auto_precision(device_type)
    assert config.with_auto_precision(auto).precision == precision


@pytest.mark.parametrize(
    ("argv", "lr", "gamma"),
    [([], 0.5, 0.9), (["--lr", "0.01"], 0.01, 0.9), (["--gamma", "1"], 0.5, 1.0)],
)
def test_lr_and_gamma_fall_back_to_the_trainers(argv: list[str], lr: float, gamma: float) -> None:
    config = parse(*argv)
    assert config.learning_rate(0.5) == lr
    assert config.lr_decay(0.9) == gamma


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        ([], "checkpoint_every", 0),
        ([], "keep_checkpoints", 3),
        ([], "resume", "auto"),
        ([], "preempt_signals", ("USR2", "TERM")),
        ([], "preempt_check_every", 10),
        (["--checkpoint-every", "50"], "checkpoint_every", 50),
        (["--keep-checkpoints", "1"], "keep_checkpoints", 1),
        (["--resume", "none"], "resume", "none"),
        (
            ["--resume", "runs/a/checkpoints/step-00000040"],
            "resume",
            "runs/a/checkpoints/step-00000040",
        ),
        (["--preempt-signals", "term"], "preempt_signals", ("TERM",)),
        (["--preempt-signals", "none"], "preempt_signals", ()),
        (["--preempt-check-every", "1"], "preempt_check_every", 1),
    ],
)
def test_checkpoint_flags(argv: list[str], field: str, value: object) -> None:
    assert getattr(parse(*argv), field) == value


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--checkpoint-every", "-1"], r"--checkpoint-every must be at least 0, got -1"),
        (["--keep-checkpoints", "0"], r"--keep-checkpoints must be at least 1, got 0\n  hint: the"),
        (["--preempt-check-every", "0"], r"--preempt-check-every must be at least 1, got 0"),
        (["--resume", ""], r"--resume is empty\n  hint: give auto, none or a checkpoint"),
        (["--preempt-signals", "USR1"], r"--preempt-signals 'USR1': SIGUSR1 is refused"),
    ],
)
def test_bad_checkpoint_flags_are_named(argv: list[str], message: str) -> None:
    with pytest.raises(DdpimgError, match=message):
        parse(*argv)


def test_preempt_signals_are_a_json_list() -> None:
    assert json.loads(json.dumps(parse().to_json()))["preempt_signals"] == ["USR2", "TERM"]


@pytest.mark.parametrize(
    ("argv", "env", "log_to"),
    [
        ([], {}, ()),
        ([], {"DDPIMG_LOG_TO": "tensorboard"}, ("tensorboard",)),
        (["--log-to", "mlflow,tensorboard"], {"DDPIMG_LOG_TO": "wandb"}, ("mlflow", "tensorboard")),
        (["--log-to", "none"], {"DDPIMG_LOG_TO": "wandb"}, ()),
    ],
)
def test_log_to_from_the_flag_or_the_variable(
    argv: list[str], env: dict[str, str], log_to: tuple[str, ...]
) -> None:
    assert train_config(parser().parse_args(argv), env).log_to == log_to


def test_tracker_and_profile_flags() -> None:
    argv = [
        "--log-to", "wandb", "--project", "p", "--run-name", "n", "--run-group", "g",
        "--wandb-entity", "e", "--profile", "20-25", "--memory-snapshot",
    ]  # fmt: skip
    config = train_config(parser().parse_args(argv), {})
    assert (config.project, config.run_name, config.run_group, config.wandb_entity) == (
        "p",
        "n",
        "g",
        "e",
    )
    assert (config.profile_steps, config.memory_snapshot) == ((20, 25), True)
    assert config.to_json()["profile_steps"] == [20, 25]
    assert config.to_json()["log_to"] == ["wandb"]


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--log-to", "wandb"], {"WANDB_MODE": "cloud"}, "WANDB_MODE='cloud'"),
        (["--profile", "5-2"], {}, "--profile 5-2: steps count from 1"),
        (["--profile", "0"], {}, "--profile 0-0: steps count from 1"),
        (["--profile", "x"], {}, "--profile 'x' is not a step range"),
        (["--memory-snapshot"], {}, "--memory-snapshot records the allocator over the --profile"),
    ],
)
def test_bad_tracker_and_profile_settings_are_named(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(DdpimgError, match=re.escape(message)):
        train_config(parser().parse_args(argv), env)
