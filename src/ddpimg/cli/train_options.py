"""The training flags of ``train [TRAINER]`` and the validated ``TrainConfig`` they become.

Defaults come from ``TrainConfig``'s fields, the trainers' defaults and learning rates from
their specs (``ddpimg.train.tasks``), their own flags from their options dataclasses
(``ddpimg.train.options``), the strategies from theirs: the parser repeats no number.
Building it imports neither torch nor any trainer's code. ``train_config`` checks every
value and raises a DdpimgError naming the flag, the value and a fix; the checks that need
the world size (``--global-batch-size`` divisible by it, ``--micro-batch-size`` dividing each
rank's share) are ``ddpimg.train.batch.BatchLayout.of``, where the run starts.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddpimg.runs.names import DEFAULT_ROOT, LATEST, RUNS_VARIABLE, runs_root
from ddpimg.trace_breakdown import PROFILE_DIR
from ddpimg.trackers import LOG_TO_VARIABLE, TRACKERS, check_trackers, log_to_setting
from ddpimg.trackers.settings import DEFAULT_PROJECT
from ddpimg.train.config import (
    COMPILE_BACKENDS,
    DEFAULT_BATCH_SIZE,
    EVAL_ALL,
    PRECISIONS,
    SHORT_RUN_EVAL_SAMPLES,
    SYNTHETIC,
    TrainConfig,
    check_zero_stage_strategy,
)
from ddpimg.train.options import TrainerOptions, option_fields
from ddpimg.train.preempt_signals import parse_signals
from ddpimg.train.profiling import parse_profile_steps
from ddpimg.train.strategies import STRATEGIES, strategy_for
from ddpimg.train.tasks import TRAINERS, trainer_for, trainer_options
from ddpimg.train.tasks.spec import learning_rate_text

DEFAULTS = TrainConfig()


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the trainer positional and the training flags to ``parser``."""
    parser.add_argument(
        "trainer",
        nargs="?",
        default=DEFAULTS.trainer,
        choices=sorted(TRAINERS),
        help="what to train (default: %(default)s)",
    )
    parser.add_argument(
        "--strategy",
        default=DEFAULTS.strategy,
        choices=sorted(STRATEGIES),
        help="how gradients are shared between ranks (default: %(default)s)",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=DEFAULTS.epochs,
        help="passes over the training set (default: %(default)s)",
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=DEFAULTS.max_steps,
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
        "--micro-batch-size",
        type=int,
        default=None,
        metavar="N",
        help="samples per rank and forward pass: each rank accumulates the gradients of "
        "(its share of the batch) / N passes before the optimizer step, so the batch is the "
        "same on fewer or smaller GPUs and memory follows N (default: the whole share at once)",
    )
    parser.add_argument(
        "--data",
        default=DEFAULTS.data,
        metavar="synthetic|PATH",
        help=f"'{SYNTHETIC}' (generated, identical everywhere) or, {_data_sources()} "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--train-samples",
        type=int,
        default=None,
        help="use only the first N training samples (default: all)",
    )
    parser.add_argument(
        "--eval-samples",
        type=_eval_samples,
        default=None,
        metavar=f"N|{EVAL_ALL}",
        help=f"use only the first N evaluation samples, or {EVAL_ALL} (default: all, except "
        "that a run that stops inside its first epoch, --max-steps below one epoch, evaluates "
        f"at most {SHORT_RUN_EVAL_SAMPLES:,} spread evenly over the set)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="where rank 0 writes metrics.jsonl and manifest.json, and the ranks their "
        f"checkpoints (default: a directory of the run's own under ./{DEFAULT_ROOT} or "
        f"${RUNS_VARIABLE}, named by the trainer or script and the Slurm job id or the start "
        f"time; {DEFAULT_ROOT}/{LATEST} points to the newest)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=DEFAULTS.seed,
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
        default=DEFAULTS.log_every,
        metavar="N",
        help="write a train metrics line every N optimizer steps (default: %(default)s)",
    )
    bf16_trainers = " and ".join(spec.name for spec in TRAINERS.values() if spec.bf16_on_gpu)
    parser.add_argument(
        "--precision",
        default=DEFAULTS.precision,
        choices=PRECISIONS,
        help="bf16: autocast to bfloat16 (CPU and GPU); fp16: autocast to float16 with dynamic "
        f"loss scaling (GPUs without bf16, e.g. V100); auto: bf16 for {bf16_trainers} on a "
        "GPU, fp32 otherwise; with --strategy deepspeed, DeepSpeed's own bf16/fp16 instead of "
        "autocast (default: %(default)s)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="compile the model with torch.compile, in place (checkpoints load with or "
        "without it); the compile time is reported apart (stderr, the summary's compile_s) "
        "and left out of the throughput",
    )
    parser.add_argument(
        "--compile-backend",
        default=None,
        choices=COMPILE_BACKENDS,
        help="torch.compile's backend, with --compile: inductor generates kernels (needs a C "
        "compiler on the CPU); aot_eager and eager only trace, quickly (default: inductor)",
    )
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=DEFAULTS.warmup_steps,
        metavar="N",
        help="steps left out of the summary's steady throughput (images/s, tokens/s, MFU) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--zero-stage",
        type=int,
        default=None,
        metavar="0..3",
        help=f"DeepSpeed ZeRO stage, --strategy deepspeed only (default: {DEFAULTS.zero_stage})",
    )
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help=f"learning rate (default: the trainer's: {_learning_rates()})",
    )
    parser.add_argument(
        "--gamma",
        type=float,
        default=None,
        help=f"learning rate factor applied after every epoch (default: {_lr_decays()})",
    )
    for spec in TRAINERS.values():
        if option_fields(spec.options):
            _add_trainer_flags(parser, spec.name, spec.options)

    add_checkpoint_arguments(parser)
    add_observability_arguments(parser)


def add_observability_arguments(parser: argparse.ArgumentParser) -> None:
    """Tracker and profiler flags (docs/usage.md: "Trackers and profiling")."""
    group = parser.add_argument_group("trackers and profiling")
    group.add_argument(
        "--log-to",
        default=None,
        metavar="LIST",
        help=f"rank 0 also logs metrics.jsonl's records to these trackers, comma-separated: "
        f"{', '.join(TRACKERS)}, or none (default: ${LOG_TO_VARIABLE}, else none)",
    )
    group.add_argument(
        "--project",
        default=None,
        help=f"W&B project and MLflow experiment (default: $WANDB_PROJECT; for MLflow "
        f"$MLFLOW_EXPERIMENT_NAME first; else {DEFAULT_PROJECT})",
    )
    group.add_argument(
        "--run-name",
        default=None,
        help="the run's name in the trackers (default: $WANDB_NAME, else --out's name)",
    )
    group.add_argument(
        "--run-group",
        default=None,
        help="W&B group (an MLflow tag) (default: $WANDB_RUN_GROUP, else none)",
    )
    group.add_argument(
        "--wandb-entity",
        default=None,
        help="W&B entity (default: $WANDB_ENTITY, else the API key's user)",
    )
    group.add_argument(
        "--profile",
        default=None,
        metavar="FIRST-LAST",
        help=f"trace these optimizer steps with torch.profiler on every rank, into "
        f"--out/{PROFILE_DIR}/rank_N (Chrome trace, TensorBoard's profiler plugin)",
    )
    group.add_argument(
        "--memory-snapshot",
        action="store_true",
        help="with --profile, on CUDA: also dump the allocator's history over those steps "
        "(memory_snapshot.pickle, for pytorch.org/memory_viz)",
    )


def add_checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """Checkpoint, resume and preemption flags (docs/checkpoints-and-failures.md)."""
    group = parser.add_argument_group("checkpoints and preemption")
    group.add_argument(
        "--checkpoint-every",
        type=int,
        default=DEFAULTS.checkpoint_every,
        metavar="N",
        help="also checkpoint every N optimizer steps; checkpoints are always written after "
        "every epoch and on preemption (default: %(default)s, epochs only)",
    )
    group.add_argument(
        "--keep-checkpoints",
        type=int,
        default=DEFAULTS.keep_checkpoints,
        metavar="K",
        help="keep the K newest checkpoints in --out/checkpoints (default: %(default)s)",
    )
    group.add_argument(
        "--resume",
        default=DEFAULTS.resume,
        metavar="auto|PATH|none",
        help="auto: continue from the newest valid checkpoint in --out, if any (without "
        "--out: in the run of the same Slurm job, else the newest run of these options, if it "
        "did not complete); PATH: from that checkpoint directory; none: start over (without "
        "--out in a new directory, else removing --out's checkpoints) (default: %(default)s)",
    )
    group.add_argument(
        "--preempt-signals",
        default=",".join(DEFAULTS.preempt_signals),
        metavar="LIST",
        help="signals that make every rank checkpoint and exit with status 75, comma-separated, "
        "or 'none' (default: %(default)s; USR1 is refused: NCCL may use it)",
    )
    group.add_argument(
        "--preempt-check-every",
        type=int,
        default=DEFAULTS.preempt_check_every,
        metavar="N",
        help="steps between the ranks' agreement on a received signal (one all-reduce of a "
        "scalar, a host sync on GPU) (default: %(default)s)",
    )


def train_config(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> TrainConfig:
    """The config from parsed ``add_training_arguments`` flags, checked against the trainer
    and the strategy it names. ``env``: the environment the run gets (the site profile's
    defaults applied); it supplies ``DDPIMG_LOG_TO`` and the trackers' variables, which
    are checked here, on every rank, before anything starts."""
    env = {} if env is None else env
    log_to = log_to_setting(args.log_to, env)
    batch_size, global_batch = args.batch_size, args.global_batch_size
    if batch_size is None and global_batch is None:
        batch_size = TRAINERS[args.trainer].default_batch_size
    if args.zero_stage is not None:
        check_zero_stage_strategy(args.zero_stage, args.strategy)
    config = TrainConfig(
        trainer=args.trainer,
        strategy=args.strategy,
        epochs=args.epochs,
        max_steps=args.max_steps,
        batch_size=batch_size,
        global_batch_size=global_batch,
        micro_batch_size=args.micro_batch_size,
        data=args.data,
        train_samples=args.train_samples,
        eval_samples=args.eval_samples,
        out=runs_root(env) if args.out is None else Path(args.out),
        seed=args.seed,
        deterministic=args.deterministic,
        log_every=args.log_every,
        precision=args.precision,
        zero_stage=DEFAULTS.zero_stage if args.zero_stage is None else args.zero_stage,
        lr=args.lr,
        gamma=args.gamma,
        warmup_steps=args.warmup_steps,
        checkpoint_every=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints,
        resume=args.resume,
        preempt_signals=parse_signals(args.preempt_signals),
        preempt_check_every=args.preempt_check_every,
        log_to=log_to,
        project=args.project,
        run_name=args.run_name,
        run_group=args.run_group,
        wandb_entity=args.wandb_entity,
        profile_steps=None if args.profile is None else parse_profile_steps(args.profile),
        memory_snapshot=args.memory_snapshot,
        compile=args.compile,
        compile_backend=args.compile_backend,
        options=trainer_options(args.trainer, vars(args)),
    )
    trainer_for(config)
    strategy_for(config)
    check_trackers(config.log_to, config.out, env, config.tracker_options())
    return config


def _add_trainer_flags(
    parser: argparse.ArgumentParser, trainer: str, options: type[TrainerOptions]
) -> None:
    """One help group per trainer, a flag per field of its options; a flag left out stays
    None (the trainer's default)."""
    group = parser.add_argument_group(trainer)
    for item in option_fields(options):
        arguments: dict[str, Any] = {
            "default": None,
            "help": f"{item.flag.help} (default: {item.flag.default})",
        }
        if item.kind is bool:
            arguments["action"] = argparse.BooleanOptionalAction
        else:
            arguments |= {
                "metavar": item.flag.metavar,
                "type": None if item.kind is str else item.kind,
                "choices": item.flag.choices,
            }
        group.add_argument(item.option, **arguments)


def _eval_samples(text: str) -> int | str:
    """``--eval-samples``: a whole number (checked by ``TrainConfig``) or ``all``."""
    if text == EVAL_ALL:
        return EVAL_ALL
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number or {EVAL_ALL}, got {text!r}"
        ) from None


def _data_sources() -> str:
    """What ``--data PATH`` is, trainer by trainer."""
    sources = [f"for {s.name}, {s.data_source}" for s in TRAINERS.values() if s.data_source]
    synthetic = [f"{s.name} is synthetic only" for s in TRAINERS.values() if not s.data_source]
    return "; ".join(sources + synthetic)


def _learning_rates() -> str:
    """Each trainer's default learning rate and optimizer."""
    rates = []
    for spec in TRAINERS.values():
        note = f"; {spec.learning_rate_note}" if spec.learning_rate_note else ""
        rates.append(
            f"{spec.name} {learning_rate_text(spec.learning_rate)} ({spec.optimizer}{note})"
        )
    return ", ".join(rates)


def _lr_decays() -> str:
    """The trainers' default ``--gamma``: the exceptions to 1."""
    decays = [f"{s.lr_decay:g} for {s.name}" for s in TRAINERS.values() if s.lr_decay != 1.0]
    return ", ".join([*decays, "1 otherwise"])
