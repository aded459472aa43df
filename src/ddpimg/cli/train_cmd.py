"""``train``: resolve, clean the environment, then run a trainer, become a user's script, or
start N local workers through torchrun's own launcher API."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import NoReturn

from ddpimg.cli.launch import prepare_launch
from ddpimg.cli.launch_options import (
    add_local_rank_argument,
    add_nproc_argument,
    add_site_options,
)
from ddpimg.cli.train_options import add_training_arguments, train_config
from ddpimg.errors import DdpimgError
from ddpimg.plan import LaunchPlan
from ddpimg.script.launch import (
    boot_program,
    check_script,
    script_argv,
    script_exports,
    script_options,
)
from ddpimg.train import startup
from ddpimg.train.preempt_signals import parse_signals
from ddpimg.train.preemption import PreemptionWatch
from ddpimg.train.tasks import TRAINERS


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """Options about how the job runs (as opposed to what it trains)."""
    group = parser.add_argument_group("launch")
    add_nproc_argument(group)
    add_site_options(group)
    add_local_rank_argument(group)
    group.add_argument(
        "--script",
        nargs=argparse.REMAINDER,
        metavar="FILE [ARGS]",
        help="run your own script instead of a bundled trainer, with the resolved environment "
        "exported and ddpimg's runtime around it: run record, stall watch, preemption, "
        "Hugging Face and Lightning integrations (must come last; a --local-rank given to "
        "train is passed on to it)",
    )
    script = parser.add_argument_group(
        "your own script (train --script): turn a part of ddpimg's runtime off"
    )
    script.add_argument(
        "--no-watch",
        action="store_true",
        help="no stall watch (DDPIMG_STALL_WATCH=0 does the same for trainers and scripts)",
    )
    script.add_argument(
        "--no-record", action="store_true", help="no manifest.json and metrics.jsonl in --out"
    )
    script.add_argument(
        "--no-integrations",
        action="store_true",
        help="no ddpimg callbacks in Hugging Face and Lightning Trainers (no checkpoint on "
        "preemption through them, no automatic resume, no metrics from them)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_training_arguments(parser)
    add_launch_arguments(parser)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    startup.mark("launch")
    launch = prepare_launch(args, argv)
    plan = launch.plan
    startup.mark("plan")
    if args.script is not None:
        check_script(args.script)
        if args.compile:
            raise DdpimgError(
                "--compile compiles a bundled trainer's model; a --script compiles its own",
                hint="drop --compile and call torch.compile(model) in your script",
            )
    if launch.local_workers:
        program: list[str] | None = None  # None: train again, in each worker
        if args.script:
            os.environ.update(script_options(plan, args).to_environ())
            program = boot_program(args.script[0], args.script[1:])
        return launch.start_local_workers(program, parse_signals(args.preempt_signals))
    if args.script:
        passed_on = (
            [f"{args.local_rank_option}={args.local_rank}"] if args.local_rank_option else []
        )
        exec_script(plan, args, [*passed_on, *args.script[1:]])
    return run_worker(plan, args)


def run_worker(plan: LaunchPlan, args: argparse.Namespace) -> int:
    import torch  # noqa: F401  (its import time is a startup phase of its own)

    from ddpimg import runtime
    from ddpimg.runtime.flight_recorder import TRACE_DIR
    from ddpimg.train import run_training

    startup.mark("imports")
    config = train_config(args, plan.child_environment(os.environ))
    # Without --out, config.out is the runs root until the run has its own directory there.
    runs = config.out if args.out is None else None
    if config.deterministic:
        # cuBLAS is only deterministic with a fixed workspace, read when CUDA starts.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # Signals are watched from before the rendezvous: one arriving there must not kill a
    # run that a batch script would requeue on exit status 75.
    with PreemptionWatch(config.preempt_signals, config.preempt_check_every) as preemption:
        ctx = runtime.initialize(
            plan,
            backend=args.backend,
            timeout_s=args.timeout,
            devices_per_rank=TRAINERS[config.trainer].devices_per_rank(config),
            trace_dir=None if runs is not None else str(config.out / TRACE_DIR),
            stall_watch=True,
            stop=lambda: preemption.received,
        )
        startup.mark("process_group")
        try:
            status = run_training(config, ctx, preemption, runs=runs)
        finally:
            # run_training's ranks met at its end: no barrier is left to make.
            runtime.shutdown(finished=False)
    # The run is over. A preemption signal still on its way (the job ended close to its time
    # limit) would otherwise kill the exiting process and turn a completed run into a
    # failed step in the batch script.
    for sig in preemption.signals:
        signal.signal(sig, signal.SIG_IGN)
    return status


def exec_script(plan: LaunchPlan, args: argparse.Namespace, script_args: list[str]) -> NoReturn:
    """Replace this process by the user's script behind its boot, with the plan exported
    (``ddpimg.script`` says why exec, not a child)."""
    from ddpimg import runtime

    path = args.script[0]
    runtime.check_interfaces(plan)
    runtime.check_hardware(plan)
    extra = script_exports(plan, os.environ)
    runtime.apply_plan(plan, publish_master=False)
    os.environ.update(extra)
    os.environ.update(script_options(plan, args).to_environ())
    argv = script_argv(path, script_args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
