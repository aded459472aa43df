"""The training options of ``train [TRAINER]`` and the validated ``TrainConfig`` they become.

Building the parser imports neither torch nor any trainer. ``TrainConfig.from_namespace``
checks every value and raises a DdpimgError naming the flag, the value and a fix; the one
check that needs the world size (``--global-batch-size`` divisible by it) is
``TrainConfig.per_rank_batch``.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ddpimg.errors import DdpimgError
from ddpimg.train.preemption import DEFAULT_SIGNALS, parse_signals
from ddpimg.train.strategies import STRATEGIES
from ddpimg.train.tasks import TASKS

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# --precision auto: bf16 autocast on a GPU for the trainers that benchmark GPUs.
BF16_ON_GPU_TRAINERS = ("resnet", "gpt")
ZERO_STAGES = (0, 1, 2, 3)
DEFAULT_BATCH_SIZE = 64
# Per-rank batches that fit a 40 GB GPU at the default model sizes.
DEFAULT_BATCH_SIZES = {"resnet": 32, "gpt": 8}
GPT_SIZES = ("124m", "tiny")
DEFAULT_GPUS_PER_REPLICA = 2
MIN_IMAGE_SIZE = 32
# Flags that belong to one trainer: field name -> (flag, trainer).
TRAINER_FLAGS = {
    "arch": ("--arch", "resnet"),
    "image_size": ("--image-size", "resnet"),
    "sync_batchnorm": ("--sync-batchnorm", "resnet"),
    "size": ("--size", "gpt"),
    "seq_len": ("--seq-len", "gpt"),
    "gpus_per_replica": ("--gpus-per-replica", "toy"),
}
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
        metavar="synthetic|PATH",
        help="'synthetic' (generated, identical everywhere) or, for mnist, a directory holding "
        "the raw MNIST idx files as torchvision lays them out (DIR/MNIST/raw/...); for resnet, "
        "an ImageFolder directory with train/ and val/; for gpt, a UTF-8 text file read as "
        "bytes; toy is synthetic only (default: %(default)s)",
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
        default="auto",
        choices=PRECISIONS,
        help="bf16: autocast to bfloat16 (CPU and GPU); fp16: autocast to float16 with dynamic "
        "loss scaling (GPUs without bf16, e.g. V100); auto: bf16 for resnet and gpt on a "
        "GPU, fp32 otherwise (default: %(default)s)",
    )
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=10,
        metavar="N",
        help="steps left out of the summary's steady throughput (images/s, tokens/s, MFU) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--zero-stage",
        type=int,
        default=None,
        metavar="0..3",
        help="DeepSpeed ZeRO stage, --strategy deepspeed only (default: 0)",
    )
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help="learning rate (default: the trainer's: mnist 1.0 (Adadelta), toy 1e-4 (Adam), "
        "resnet 0.1 (SGD), gpt 6e-4 (AdamW; 1e-3 for --size tiny))",
    )
    parser.add_argument(
        "--gamma",
        type=float,
        default=None,
        help="learning rate factor applied after every epoch (default: 0.7 for mnist, 1 otherwise)",
    )
    resnet = parser.add_argument_group("resnet")
    resnet.add_argument(
        "--arch",
        default=None,
        metavar="NAME",
        help="any torchvision classification model, e.g. resnet18, vit_b_16 (default: resnet50)",
    )
    resnet.add_argument(
        "--image-size",
        type=int,
        default=None,
        metavar="PX",
        help="side of the square images: synthetic ones are generated at it, ImageFolder ones "
        "resized and centre-cropped to it (default: 224)",
    )
    resnet.add_argument(
        "--sync-batchnorm",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="BatchNorm statistics over the global batch with more than one rank (GPU only; "
        "needed for topology invariance, costs a host sync per layer) (default: on)",
    )
    gpt = parser.add_argument_group("gpt")
    gpt.add_argument(
        "--size",
        default=None,
        choices=GPT_SIZES,
        help="124m: GPT-2 small (12 layers, 768 wide, context 1024); tiny: 2 layers, 64 wide, "
        "context 64, for CPU runs (default: 124m)",
    )
    gpt.add_argument(
        "--seq-len",
        type=int,
        default=None,
        metavar="N",
        help="tokens per sample, at most the model's context (default: the context)",
    )
    toy = parser.add_argument_group("toy")
    toy.add_argument(
        "--gpus-per-replica",
        type=int,
        default=None,
        metavar="1|2",
        help=f"GPUs each process drives: 2 puts the head and the tail on two GPUs; GPUs per "
        f"node must be processes per node times this (default: {DEFAULT_GPUS_PER_REPLICA})",
    )

    add_checkpoint_arguments(parser)


def add_checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """Checkpoint, resume and preemption flags (README: "Checkpoints and preemption")."""
    group = parser.add_argument_group("checkpoints and preemption")
    group.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        metavar="N",
        help="also checkpoint every N optimizer steps; checkpoints are always written after "
        "every epoch and on preemption (default: %(default)s, epochs only)",
    )
    group.add_argument(
        "--keep-checkpoints",
        type=int,
        default=3,
        metavar="K",
        help="keep the K newest checkpoints in --out/checkpoints (default: %(default)s)",
    )
    group.add_argument(
        "--resume",
        default="auto",
        metavar="auto|PATH|none",
        help="auto: continue from the newest valid checkpoint in --out, if any; PATH: from "
        "that checkpoint directory; none: start over, removing --out's checkpoints "
        "(default: %(default)s)",
    )
    group.add_argument(
        "--preempt-signals",
        default=",".join(DEFAULT_SIGNALS),
        metavar="LIST",
        help="signals that make every rank checkpoint and exit with status 75, comma-separated, "
        "or 'none' (default: %(default)s; USR1 is refused: NCCL may use it)",
    )
    group.add_argument(
        "--preempt-check-every",
        type=int,
        default=10,
        metavar="N",
        help="steps between the ranks' agreement on a received signal (one all-reduce of a "
        "scalar, a host sync on GPU) (default: %(default)s)",
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
    precision: str = "auto"
    zero_stage: int = 0
    lr: float | None = None
    gamma: float | None = None
    warmup_steps: int = 10
    arch: str | None = None
    image_size: int | None = None
    sync_batchnorm: bool | None = None
    size: str | None = None
    seq_len: int | None = None
    gpus_per_replica: int | None = None
    checkpoint_every: int = 0
    keep_checkpoints: int = 3
    resume: str = "auto"
    preempt_signals: tuple[str, ...] = DEFAULT_SIGNALS
    preempt_check_every: int = 10

    def __post_init__(self) -> None:
        _validate(self)

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> TrainConfig:
        """The config from parsed ``add_training_arguments`` flags."""
        batch_size, global_batch = ns.batch_size, ns.global_batch_size
        if batch_size is None and global_batch is None:
            batch_size = DEFAULT_BATCH_SIZES.get(ns.trainer, DEFAULT_BATCH_SIZE)
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
            warmup_steps=ns.warmup_steps,
            arch=ns.arch,
            image_size=ns.image_size,
            sync_batchnorm=ns.sync_batchnorm,
            size=ns.size,
            seq_len=ns.seq_len,
            gpus_per_replica=ns.gpus_per_replica,
            checkpoint_every=ns.checkpoint_every,
            keep_checkpoints=ns.keep_checkpoints,
            resume=ns.resume,
            preempt_signals=parse_signals(ns.preempt_signals),
            preempt_check_every=ns.preempt_check_every,
        )

    def learning_rate(self, default: float) -> float:
        """``--lr``, or the trainer's ``default`` when it was not given."""
        return default if self.lr is None else self.lr

    def lr_decay(self, default: float) -> float:
        """``--gamma``, or the trainer's ``default`` when it was not given."""
        return default if self.gamma is None else self.gamma

    @property
    def devices_per_rank(self) -> int:
        """GPUs each process drives: ``--gpus-per-replica`` for toy, one otherwise."""
        if self.trainer != "toy":
            return 1
        return self.gpus_per_replica or DEFAULT_GPUS_PER_REPLICA

    def for_device(self, device_type: str) -> TrainConfig:
        """The config with ``--precision auto`` decided for a ``device_type`` ('cuda', 'cpu')."""
        if self.precision != "auto":
            return self
        bf16 = device_type == "cuda" and self.trainer in BF16_ON_GPU_TRAINERS
        return replace(self, precision="bf16" if bf16 else "fp32")

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
        return asdict(self) | {"out": str(self.out), "preempt_signals": list(self.preempt_signals)}


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
    _at_least("--warmup-steps", config.warmup_steps, 0, "0 counts every step")
    if not config.data:
        raise DdpimgError(
            "--data is empty",
            hint="give 'synthetic', or the dataset's path (see train --help for each trainer)",
        )
    _validate_trainer_flags(config)
    _validate_checkpoint_flags(config)
    if config.lr is not None and not config.lr > 0:
        raise DdpimgError(
            f"--lr must be positive, got {config.lr}",
            hint="leave it out for the trainer's default (mnist's tutorial uses 1.0)",
        )
    if config.gamma is not None and not 0 < config.gamma <= 1:
        raise DdpimgError(
            f"--gamma must be in (0, 1], got {config.gamma}",
            hint="the learning rate is multiplied by it after every epoch; 1 keeps it constant",
        )


def _validate_trainer_flags(config: TrainConfig) -> None:
    for field, (flag, trainer) in TRAINER_FLAGS.items():
        if getattr(config, field) is not None and config.trainer != trainer:
            raise DdpimgError(
                f"{flag} applies to the {trainer} trainer only, got trainer {config.trainer}",
                hint=f"drop {flag}, or run `train {trainer}`",
            )
    if config.trainer == "toy" and config.data != SYNTHETIC:
        raise DdpimgError(
            f"the toy trainer has only a synthetic dataset, got --data {config.data}",
            hint="drop --data (the toy rows are [x]*32 with label x % 10)",
        )
    if config.size is not None:
        _choice("--size", config.size, GPT_SIZES)
    _at_least("--image-size", config.image_size, MIN_IMAGE_SIZE, "ImageNet models take 224")
    _at_least("--seq-len", config.seq_len, 1, "leave it out to use the model's whole context")
    if config.gpus_per_replica is not None and config.gpus_per_replica not in (1, 2):
        raise DdpimgError(
            f"--gpus-per-replica must be 1 or 2, got {config.gpus_per_replica}",
            hint="the toy model has two parts, head and tail: 2 puts them on two GPUs, 1 on one",
        )


def _validate_checkpoint_flags(config: TrainConfig) -> None:
    _at_least("--checkpoint-every", config.checkpoint_every, 0, "0 checkpoints after epochs only")
    _at_least("--keep-checkpoints", config.keep_checkpoints, 1, "the newest one must stay")
    _at_least("--preempt-check-every", config.preempt_check_every, 1, "1 checks every step")
    if not config.resume:
        raise DdpimgError("--resume is empty", hint="give auto, none or a checkpoint directory")
    if config.preempt_signals:
        parse_signals(",".join(config.preempt_signals))


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
