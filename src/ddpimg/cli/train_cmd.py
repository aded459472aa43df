"""``train``: resolve, clean the environment, then run a trainer, become a user's script, or
start N local workers through torchrun's own launcher API."""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
from typing import NoReturn

from ddpimg.cli import train_parser
from ddpimg.cli.launch import prepare_launch
from ddpimg.cli.sweep_args import sweep_given
from ddpimg.cli.train_options import train_config
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``train``'s whole parser (``ddpimg.cli.train_parser``), for the command table."""
    train_parser.add_arguments(parser)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    if sweep_given(args):
        from ddpimg.cli.sweep_options import run_local_sweep

        return run_local_sweep(args, argv)
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
    # The process ends next. Its last collection would walk every object torch and its
    # compiler stack made, for nothing the run still needs (its files are closed, its process
    # group is gone): 1.2-2.5 s of a smoke run's exit on 2 busy cores, 0.3-0.6 s frozen.
    gc.freeze()
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
