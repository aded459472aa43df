"""``train``: resolve, clean the environment, then run a trainer, become a user's script, or
start N local workers through torchrun's own launcher API."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import NoReturn

from ddpimg.cli.launch_options import (
    add_local_rank_argument,
    add_nproc_argument,
    add_site_options,
    local_workers,
    plan_from_args,
)
from ddpimg.cli.local_workers import launch_local_workers, strip_nproc
from ddpimg.cli.train_options import add_training_arguments, train_config
from ddpimg.errors import LauncherError
from ddpimg.plan import LaunchPlan
from ddpimg.runtime.reexec import needs_reexec, reexec_clean
from ddpimg.train import startup
from ddpimg.train.preemption import PreemptionWatch, parse_signals
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
        help="replace train by your own script, with the resolved environment exported "
        "(must come last; a --local-rank given to train is passed on to it)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_training_arguments(parser)
    add_launch_arguments(parser)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    startup.mark("launch")
    env = dict(os.environ)
    plan = plan_from_args(args, env)
    if needs_reexec(plan, env):
        reexec_clean(plan, env, argv)
    startup.mark("plan")
    if args.script is not None and not args.script:
        raise LauncherError("--script needs a FILE", hint="train --script my_ddp.py --lr 0.1")
    nproc = local_workers(args)
    if nproc:
        worker_argv = strip_nproc(argv)
        program = (
            worker_argv[worker_argv.index("--script") + 1 :]
            if args.script
            else ["-m", "ddpimg", *worker_argv]
        )
        return launch_local_workers(
            plan,
            nproc,
            program,
            timeout_s=args.timeout,
            preempt_signals=parse_signals(args.preempt_signals),
        )
    if args.script:
        passed_on = (
            [f"{args.local_rank_option}={args.local_rank}"] if args.local_rank_option else []
        )
        exec_script(plan, args.script[0], [*passed_on, *args.script[1:]])
    return run_worker(plan, args)


def run_worker(plan: LaunchPlan, args: argparse.Namespace) -> int:
    import torch  # noqa: F401  (its import time is a startup phase of its own)

    from ddpimg import runtime
    from ddpimg.runtime.flight_recorder import TRACE_DIR
    from ddpimg.train import run_training

    startup.mark("imports")
    config = train_config(args, plan.child_environment(os.environ))
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
            trace_dir=str(config.out / TRACE_DIR),
            stall_watch=True,
        )
        startup.mark("process_group")
        finished = False
        try:
            status = run_training(config, ctx, preemption)
            finished = True
        finally:
            runtime.shutdown(finished)
    # The run is over. A preemption signal still on its way (the job ended close to its time
    # limit) would otherwise kill the exiting process and turn a completed run into a
    # failed step in the batch script.
    for sig in preemption.signals:
        signal.signal(sig, signal.SIG_IGN)
    return status


def exec_script(plan: LaunchPlan, path: str, args: list[str]) -> NoReturn:
    """Replace this process by the user's script with the plan exported
    (``ddpimg.runtime.user_script`` says why exec, not a child)."""
    from ddpimg import runtime
    from ddpimg.runtime.user_script import script_argv, script_exports

    if not os.path.isfile(path):
        raise LauncherError(
            f"--script {path}: no such file", hint="give the path of a Python script"
        )
    runtime.check_interfaces(plan)
    runtime.check_hardware(plan)
    extra = script_exports(plan, os.environ)
    runtime.apply_plan(plan, publish_master=False)
    os.environ.update(extra)
    argv = script_argv(plan, path, args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
