"""The training options of ``train [TRAINER]`` and the validated ``TrainConfig`` they become.

Building the parser imports neither torch nor any trainer. ``TrainConfig.from_namespace``
checks every value and raises a DdpimgError naming the flag, the value and a fix; the one
check that needs the world size (``--global-batch-size`` divisible by it) is
``TrainConfig.per_rank_batch``.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ddpimg.errors import DdpimgError
from ddpimg.train.strategies import STRATEGIES
from ddpimg.train.tasks import TASKS

PRECISIONS = ("fp32", "bf16")
ZERO_STAGES = (0, 1, 2, 3)
DEFAULT_BATCH_SIZE = 64
DEFAULT_OUT = "ddpimg-run"
SYNTHETIC = "synthetic"
MAX_SEED = 2**63


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the trainer positional and the training flags to ``parser``."""
    parser.add_argument(
        "trainer",
        nargs="?",
        default="mnist",
        choices=sorted(TASKS),
        help="what to train (default: %(default)s)",
    )
    parser.add_argument(
        "--strategy",
        default="ddp",
        choices=sorted(STRATEGIES),
        help="how gradients are shared between ranks (default: %(default)s)",
    )
    parser.add_argument(
        "--epochs", type=int, default=14, help="passes over the training set (default: %(default)s)"
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=0,
        help="stop after this many optimizer steps in total, then evaluate; 0: no limit "
        "(default: %(default)s)",
    )
    batch = parser.add_mutually_exclusive_group()
    batch.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help=f"samples per rank and step (default: {DEFAULT_BATCH_SIZE})",
    )
    batch.add_argument(
        "--global-batch-size",
        type=int,
        default=None,
        help="samples per step over all ranks; must be divisible by the world size. Fixing it "
        "gives the same loss trajectory whatever the number of processes",
    )
    parser.add_argument(
        "--data",
        default=SYNTHETIC,
        metavar="synthetic|DIR",
        help="'synthetic' (generated, identical everywhere) or a directory holding the raw "
        "MNIST idx files as torchvision lays them out (DIR/MNIST/raw/...) (default: %(default)s)",
    )
    parser.add_argument(
        "--train-samples",
        type=int,
        default=None,
        help="use only the first N training samples (default: all)",
    )
    parser.add_argument(
        "--eval-samples",
        type=int,
        default=None,
        help="use only the first N evaluation samples (default: all)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(DEFAULT_OUT),
        metavar="DIR",
        help="where rank 0 writes metrics.jsonl and manifest.json (default: ./%(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=1,
        help="seeds data order, dropout and initial weights (default: %(default)s)",
    )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="use deterministic kernels only: repeats are bitwise identical on the CPU",
    )
    parser.add_argument(
        "--log-every",
        type=int,
        default=10,
        metavar="N",
        help="write a train metrics line every N optimizer steps (default: %(default)s)",
    )
    parser.add_argument(
        "--precision",
        default="fp32",
        choices=PRECISIONS,
        help="bf16: autocast to bfloat16 (CPU and GPU) (default: %(default)s)",
    )
    parser.add_argument(
        "--zero-stage",
        type=int,
        default=None,
        metavar="0..3",
        help="DeepSpeed ZeRO stage, --strategy deepspeed only (default: 0)",
    )
    parser.add_argument(
        "--lr", type=float, default=1.0, help="Adadelta learning rate (default: %(default)s)"
    )
    parser.add_argument(
        "--gamma",
        type=float,
        default=0.7,
        help="learning rate factor applied after every epoch (default: %(default)s)",
    )


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs besides the distributed context. Validated on
    construction through ``from_namespace``; ``batch_size`` and ``global_batch_size`` are
    exclusive (exactly one is set)."""

    trainer: str = "mnist"
    strategy: str = "ddp"
    epochs: int = 14
    max_steps: int = 0
    batch_size: int | None = DEFAULT_BATCH_SIZE
    global_batch_size: int | None = None
    data: str = SYNTHETIC
    train_samples: int | None = None
    eval_samples: int | None = None
    out: Path = Path(DEFAULT_OUT)
    seed: int = 1
    deterministic: bool = False
    log_every: int = 10
    precision: str = "fp32"
    zero_stage: int = 0
    lr: float = 1.0
    gamma: float = 0.7

    def __post_init__(self) -> None:
        _validate(self)

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> TrainConfig:
        """The config from parsed ``add_training_arguments`` flags."""
        batch_size, global_batch = ns.batch_size, ns.global_batch_size
        if batch_size is None and global_batch is None:
            batch_size = DEFAULT_BATCH_SIZE
        if ns.zero_stage is not None:
            _check_zero_stage_strategy(ns.zero_stage, ns.strategy)
        return cls(
            trainer=ns.trainer,
            strategy=ns.strategy,
            epochs=ns.epochs,
            max_steps=ns.max_steps,
            batch_size=batch_size,
            global_batch_size=global_batch,
            data=ns.data,
            train_samples=ns.train_samples,
            eval_samples=ns.eval_samples,
            out=Path(ns.out),
            seed=ns.seed,
            deterministic=ns.deterministic,
            log_every=ns.log_every,
            precision=ns.precision,
            zero_stage=0 if ns.zero_stage is None else ns.zero_stage,
            lr=ns.lr,
            gamma=ns.gamma,
        )

    def per_rank_batch(self, world_size: int) -> int:
        """Samples each rank takes per step."""
        if self.batch_size is not None:
            return self.batch_size
        if self.global_batch_size is None:
            raise DdpimgError(
                "neither --batch-size nor --global-batch-size is set",
                hint="give one of them",
            )
        if self.global_batch_size % world_size:
            lower = self.global_batch_size // world_size * world_size
            higher = lower + world_size
            suggestion = f"{lower} or {higher}" if lower else str(higher)
            raise DdpimgError(
                f"--global-batch-size {self.global_batch_size} is not divisible by the "
                f"world size {world_size}",
                hint=f"use a multiple of {world_size} (e.g. {suggestion}), or --batch-size N "
                "for N samples on every rank",
            )
        return self.global_batch_size // world_size

    def to_json(self) -> dict[str, Any]:
        """The config as JSON-ready values (for manifest.json)."""
        return asdict(self) | {"out": str(self.out)}


def _validate(config: TrainConfig) -> None:
    _choice("trainer", config.trainer, tuple(sorted(TASKS)))
    _choice("--strategy", config.strategy, tuple(sorted(STRATEGIES)))
    _choice("--precision", config.precision, PRECISIONS)
    if config.zero_stage not in ZERO_STAGES:
        raise DdpimgError(
            f"--zero-stage must be one of 0, 1, 2, 3, got {config.zero_stage}",
            hint="0: plain data parallel; 1: shard optimizer state; 2: and gradients; "
            "3: and parameters",
        )
    if config.zero_stage:
        _check_zero_stage_strategy(config.zero_stage, config.strategy)
    if (config.batch_size is None) == (config.global_batch_size is None):
        raise DdpimgError(
            f"give exactly one of --batch-size and --global-batch-size, got "
            f"--batch-size {config.batch_size} and --global-batch-size {config.global_batch_size}",
            hint="--batch-size is per rank; --global-batch-size is split over the ranks",
        )
    _at_least("--epochs", config.epochs, 1, "one epoch is one pass over the training set")
    _at_least("--max-steps", config.max_steps, 0, "0 means no step limit")
    _at_least("--batch-size", config.batch_size, 1, "it counts samples per rank and step")
    _at_least("--global-batch-size", config.global_batch_size, 1, "it counts samples per step")
    _at_least("--train-samples", config.train_samples, 1, "leave it out to use all samples")
    _at_least("--eval-samples", config.eval_samples, 1, "leave it out to use all samples")
    _at_least("--seed", config.seed, 0, "any integer from 0 to 2**63 - 1")
    if config.seed >= MAX_SEED:
        raise DdpimgError(
            f"--seed must be below 2**63, got {config.seed}", hint="any integer from 0 to 2**63 - 1"
        )
    _at_least("--log-every", config.log_every, 1, "it counts optimizer steps between lines")
    if not config.data:
        raise DdpimgError(
            "--data is empty", hint="give 'synthetic' or a directory with the MNIST idx files"
        )
    if not config.lr > 0:
        raise DdpimgError(f"--lr must be positive, got {config.lr}", hint="the tutorial uses 1.0")
    if not 0 < config.gamma <= 1:
        raise DdpimgError(
            f"--gamma must be in (0, 1], got {config.gamma}",
            hint="the learning rate is multiplied by it after every epoch; 1 keeps it constant",
        )


def _check_zero_stage_strategy(stage: int, strategy: str) -> None:
    if strategy != "deepspeed":
        raise DdpimgError(
            f"--zero-stage {stage} applies to --strategy deepspeed only, got --strategy {strategy}",
            hint="drop --zero-stage, or add --strategy deepspeed",
        )


def _choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise DdpimgError(
            f"{flag} must be one of {', '.join(choices)}, got {value!r}",
            hint=f"pick one of {', '.join(choices)}",
        )


def _at_least(flag: str, value: int | None, minimum: int, hint: str) -> None:
    if value is not None and value < minimum:
        raise DdpimgError(f"{flag} must be at least {minimum}, got {value}", hint=hint)
