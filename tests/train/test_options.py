from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.train.options import TrainConfig, add_training_arguments


def parse(*argv: str) -> TrainConfig:
    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    return TrainConfig.from_namespace(parser.parse_args(list(argv)))


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
        out=Path("ddpimg-run"),
        seed=1,
        log_every=10,
        precision="fp32",
        zero_stage=0,
        lr=1.0,
        gamma=0.7,
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
        (["--out", "runs/a"], "out", Path("runs/a")),
        (["--seed", "0"], "seed", 0),
        (["--deterministic"], "deterministic", True),
        (["--log-every", "1"], "log_every", 1),
        (["--precision", "bf16"], "precision", "bf16"),
        (["--lr", "0.5"], "lr", 0.5),
        (["--gamma", "1"], "gamma", 1.0),
    ],
)
def test_flag_sets_field(argv: list[str], field: str, value: object) -> None:
    assert getattr(parse(*argv), field) == value


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
        (["--lr", "0"], r"--lr must be positive, got 0.0"),
        (["--lr", "nan"], r"--lr must be positive, got nan"),
        (["--gamma", "0"], r"--gamma must be in \(0, 1\], got 0.0"),
        (["--gamma", "1.5"], r"--gamma must be in \(0, 1\], got 1.5"),
        (["--data", ""], r"--data is empty\n  hint: give 'synthetic' or a directory"),
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
    ],
)
def test_parser_rejects(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"batch_size": None, "global_batch_size": None},
            r"give exactly one of --batch-size and --global-batch-size, got --batch-size None",
        ),
        ({"batch_size": 8, "global_batch_size": 16}, r"got --batch-size 8 and --global-batch"),
        ({"trainer": "gpt2"}, r"trainer must be one of mnist, got 'gpt2'"),
        ({"strategy": "fsdp"}, r"--strategy must be one of ddp, deepspeed, got 'fsdp'"),
        ({"precision": "fp16"}, r"--precision must be one of fp32, bf16, got 'fp16'"),
        ({"zero_stage": 2}, r"--zero-stage 2 applies to --strategy deepspeed only"),
    ],
)
def test_config_validates_on_construction(config: dict[str, object], message: str) -> None:
    with pytest.raises(DdpimgError, match=message):
        TrainConfig(**config)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "world_size", "per_rank"),
    [
        ([], 1, 64),
        ([], 8, 64),
        (["--batch-size", "3"], 5, 3),
        (["--global-batch-size", "64"], 1, 64),
        (["--global-batch-size", "64"], 4, 16),
        (["--global-batch-size", "64"], 64, 1),
    ],
)
def test_per_rank_batch(argv: list[str], world_size: int, per_rank: int) -> None:
    assert parse(*argv).per_rank_batch(world_size) == per_rank


@pytest.mark.parametrize(
    ("global_batch", "world_size", "message"),
    [
        (
            100,
            3,
            r"--global-batch-size 100 is not divisible by the world size 3\n"
            r"  hint: use a multiple of 3 \(e.g. 99 or 102\), or --batch-size N",
        ),
        (2, 4, r"--global-batch-size 2 is not divisible by the world size 4\n.*\(e.g. 4\)"),
    ],
)
def test_global_batch_must_divide(global_batch: int, world_size: int, message: str) -> None:
    config = parse("--global-batch-size", str(global_batch))
    with pytest.raises(DdpimgError, match=message):
        config.per_rank_batch(world_size)


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
        "from ddpimg.train.options import TrainConfig, add_training_arguments\n"
        "p = argparse.ArgumentParser(); add_training_arguments(p)\n"
        "TrainConfig.from_namespace(p.parse_args(['--strategy', 'deepspeed']))\n"
        "print(sorted(m for m in ('torch', 'deepspeed') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
