"""``TrainConfig``: what a training run needs besides the distributed context, validated.

Everything here holds for every trainer and strategy. What one trainer adds is declared in
its package (``ddpimg.train.tasks.<name>``): its default batch size and learning rate by its
``TrainerSpec``, its own flags by its options dataclass (``ddpimg.train.options``), which
``TrainConfig.options`` holds. This module imports neither the trainers nor the
strategies, nor torch.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ddpimg.errors import DdpimgError
from ddpimg.runs.names import DEFAULT_ROOT
from ddpimg.trackers.settings import TRACKERS, TrackerOptions
from ddpimg.train.options import TrainerOptions, check_at_least, check_choice
from ddpimg.train.preempt_signals import DEFAULT_SIGNALS, parse_signals

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# torch.compile backends ``--compile-backend`` takes: inductor generates kernels (gcc on the
# CPU); aot_eager and eager trace the same graphs but run torch's own kernels, compiling in
# a fraction of the time (a cheap check that a model and strategy compile at all).
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
ZERO_STAGES = (0, 1, 2, 3)
# Samples per rank and step of the origin tutorials; trainers with larger models set less.
DEFAULT_BATCH_SIZE = 64
SYNTHETIC = "synthetic"
MAX_SEED = 2**63
#: ``--eval-samples all``: the whole evaluation set, also for a short run.
EVAL_ALL = "all"
#: The most samples a run that stops inside its first epoch evaluates by default (a smoke
#: run's evaluation of 10,000 MNIST samples was two thirds of its time).
SHORT_RUN_EVAL_SAMPLES = 1024


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs besides the distributed context; the field defaults
    are the ``train`` flags' defaults. Validated on construction; ``batch_size`` and
    ``global_batch_size`` are exclusive (exactly one is set). The trainer-specific fields
    (``arch`` ... ``gpus_per_replica``) are None unless their flag was given."""

    trainer: str = "mnist"
    strategy: str = "ddp"
    epochs: int = 14
    max_steps: int = 0
    batch_size: int | None = DEFAULT_BATCH_SIZE
    global_batch_size: int | None = None
    #: Samples per rank and forward pass; None: the whole per-rank batch in one pass.
    micro_batch_size: int | None = None
    data: str = SYNTHETIC
    train_samples: int | None = None
    #: ``--eval-samples``: N (the trainer's set cut to its first N), ``EVAL_ALL``, or None:
    #: the whole set, except for a run that stops inside its first epoch (``eval_count``).
    eval_samples: int | str | None = None
    #: ``--out``; without it the runs root, under which the run takes a directory of its own
    #: when it starts (``ddpimg.train.run_dir``).
    out: Path = Path(DEFAULT_ROOT)
    seed: int = 1
    deterministic: bool = False
    log_every: int = 10
    precision: str = "auto"
    zero_stage: int = 0
    lr: float | None = None
    gamma: float | None = None
    warmup_steps: int = 10
    #: The trainer's own options (its ``TrainerSpec.options``); the bare ``TrainerOptions``:
    #: none given.
    options: TrainerOptions = field(default_factory=TrainerOptions)
    checkpoint_every: int = 0
    keep_checkpoints: int = 3
    resume: str = "auto"
    preempt_signals: tuple[str, ...] = DEFAULT_SIGNALS
    preempt_check_every: int = 10
    log_to: tuple[str, ...] = ()
    project: str | None = None
    run_name: str | None = None
    run_group: str | None = None
    wandb_entity: str | None = None
    profile_steps: tuple[int, int] | None = None
    memory_snapshot: bool = False
    compile: bool = False
    #: ``--compile-backend``; None: not given (inductor, with ``--compile``).
    compile_backend: str | None = None

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def first_eval_samples(self) -> int | None:
        """How many samples of its evaluation set the trainer loads: ``--eval-samples N``'s
        N; None for all of them (``--eval-samples all``, or left out)."""
        return self.eval_samples if isinstance(self.eval_samples, int) else None

    def eval_count(self, available: int, *, short: bool) -> int:
        """How many of the ``available`` evaluation samples (the set as the trainer loaded
        it) an evaluation takes: all of them, except that a ``short`` run (one that stops
        inside its first epoch) takes at most ``SHORT_RUN_EVAL_SAMPLES`` unless
        ``--eval-samples`` was given."""
        if short and self.eval_samples is None:
            return min(available, SHORT_RUN_EVAL_SAMPLES)
        return available

    def learning_rate(self, default: float) -> float:
        """``--lr``, or the trainer's ``default`` when it was not given."""
        return default if self.lr is None else self.lr

    def lr_decay(self, default: float) -> float:
        """``--gamma``, or the trainer's ``default`` when it was not given."""
        return default if self.gamma is None else self.gamma

    def with_auto_precision(self, precision: str) -> TrainConfig:
        """The config with ``--precision auto`` replaced by ``precision`` (what the trainer
        chose for the device, ``TrainerSpec.auto_precision``); an explicit one stays."""
        return self if self.precision != "auto" else replace(self, precision=precision)

    def tracker_options(self) -> TrackerOptions:
        """The flags that name the run in its trackers."""
        return TrackerOptions(self.project, self.run_name, self.run_group, self.wandb_entity)

    def to_json(self) -> dict[str, Any]:
        """The config as JSON-ready values, flat: the trainer's options in the place of
        ``options``. manifest.json's ``arguments`` add the other trainers' options
        (``ddpimg.train.tasks.arguments_json``)."""
        converted = {
            "out": str(self.out),
            "preempt_signals": list(self.preempt_signals),
            "log_to": list(self.log_to),
            "profile_steps": None if self.profile_steps is None else list(self.profile_steps),
        }
        values: dict[str, Any] = {}
        for item in fields(self):
            if item.name == "options":
                values |= asdict(self.options)
            else:
                values[item.name] = converted.get(item.name, getattr(self, item.name))
        return values


def check_zero_stage_strategy(stage: int, strategy: str) -> None:
    """``--zero-stage`` (any value, 0 included, when given) needs ``--strategy deepspeed``."""
    if strategy != "deepspeed":
        raise DdpimgError(
            f"--zero-stage {stage} applies to --strategy deepspeed only, got --strategy {strategy}",
            hint="drop --zero-stage, or add --strategy deepspeed",
        )


def _validate(config: TrainConfig) -> None:
    check_choice("--precision", config.precision, PRECISIONS)
    if config.zero_stage not in ZERO_STAGES:
        raise DdpimgError(
            f"--zero-stage must be one of 0, 1, 2, 3, got {config.zero_stage}",
            hint="0: plain data parallel; 1: shard optimizer state; 2: and gradients; "
            "3: and parameters",
        )
    if config.zero_stage:
        check_zero_stage_strategy(config.zero_stage, config.strategy)
    if (config.batch_size is None) == (config.global_batch_size is None):
        raise DdpimgError(
            f"give exactly one of --batch-size and --global-batch-size, got "
            f"--batch-size {config.batch_size} and --global-batch-size {config.global_batch_size}",
            hint="--batch-size is per rank; --global-batch-size is split over the ranks",
        )
    check_at_least("--epochs", config.epochs, 1, "one epoch is one pass over the training set")
    check_at_least("--max-steps", config.max_steps, 0, "0 means no step limit")
    check_at_least("--batch-size", config.batch_size, 1, "it counts samples per rank and step")
    check_at_least("--global-batch-size", config.global_batch_size, 1, "it counts samples per step")
    check_at_least(
        "--micro-batch-size", config.micro_batch_size, 1, "it counts samples per rank and forward"
    )
    check_at_least("--train-samples", config.train_samples, 1, "leave it out to use all samples")
    if isinstance(config.eval_samples, str):
        check_choice("--eval-samples", config.eval_samples, (EVAL_ALL,))
    else:
        check_at_least("--eval-samples", config.eval_samples, 1, f"{EVAL_ALL} takes the whole set")
    check_at_least("--seed", config.seed, 0, "any integer from 0 to 2**63 - 1")
    if config.seed >= MAX_SEED:
        raise DdpimgError(
            f"--seed must be below 2**63, got {config.seed}", hint="any integer from 0 to 2**63 - 1"
        )
    check_at_least("--log-every", config.log_every, 1, "it counts optimizer steps between lines")
    check_at_least("--warmup-steps", config.warmup_steps, 0, "0 counts every step")
    if not config.data:
        raise DdpimgError(
            "--data is empty",
            hint="give 'synthetic', or the dataset's path (see train --help for each trainer)",
        )
    _validate_checkpoint_flags(config)
    _validate_observability_flags(config)
    _validate_compile_flags(config)
    if config.lr is not None and not (math.isfinite(config.lr) and config.lr > 0):
        raise DdpimgError(
            f"--lr must be a positive number, got {config.lr}",
            hint="leave it out for the trainer's default (mnist's tutorial uses 1.0)",
        )
    if config.gamma is not None and not 0 < config.gamma <= 1:
        raise DdpimgError(
            f"--gamma must be in (0, 1], got {config.gamma}",
            hint="the learning rate is multiplied by it after every epoch; 1 keeps it constant",
        )


def _validate_checkpoint_flags(config: TrainConfig) -> None:
    check_at_least(
        "--checkpoint-every", config.checkpoint_every, 0, "0 checkpoints after epochs only"
    )
    check_at_least("--keep-checkpoints", config.keep_checkpoints, 1, "the newest one must stay")
    check_at_least("--preempt-check-every", config.preempt_check_every, 1, "1 checks every step")
    if not config.resume:
        raise DdpimgError("--resume is empty", hint="give auto, none or a checkpoint directory")
    if config.preempt_signals:
        parse_signals(",".join(config.preempt_signals))


def _validate_compile_flags(config: TrainConfig) -> None:
    if config.compile_backend is None:
        return
    check_choice("--compile-backend", config.compile_backend, COMPILE_BACKENDS)
    if not config.compile:
        raise DdpimgError(
            f"--compile-backend {config.compile_backend} was given without --compile",
            hint="add --compile, or drop --compile-backend",
        )


def _validate_observability_flags(config: TrainConfig) -> None:
    unknown = [name for name in config.log_to if name not in TRACKERS]
    if unknown:
        raise DdpimgError(
            f"--log-to: unknown tracker {unknown[0]!r}", hint=f"any of {', '.join(TRACKERS)}"
        )
    if config.profile_steps is not None:
        first, last = config.profile_steps
        if not 1 <= first <= last:
            raise DdpimgError(
                f"--profile {first}-{last}: steps count from 1 and the range must not be empty",
                hint="e.g. --profile 20-25 (steps 20 to 25, after the first steps' warm-up)",
            )
    if config.memory_snapshot and config.profile_steps is None:
        raise DdpimgError(
            "--memory-snapshot records the allocator over the --profile steps, and no "
            "--profile was given",
            hint="add --profile FIRST-LAST, e.g. --profile 20-25",
        )
