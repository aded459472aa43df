"""``train``: resolve, clean the environment, then run a trainer, a user script, or N local
workers through torchrun's own launcher API."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from ddpimg import exitcodes
from ddpimg.errors import LauncherError
from ddpimg.plan import RANK_VARIABLES, LaunchPlan, build_plan, short_hostname
from ddpimg.runtime.reexec import needs_reexec, reexec_clean
from ddpimg.train import startup
from ddpimg.train.options import TrainConfig, add_training_arguments
from ddpimg.train.preemption import PreemptionWatch, forward_to_children, parse_signals

DEFAULT_TIMEOUT_S = 600.0
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)
# The signals torch elastic's agent handles (its default) by shutting the workers down.
ELASTIC_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """Options about how the job runs (as opposed to what it trains)."""
    group = parser.add_argument_group("launch")
    group.add_argument(
        "--nproc-per-node",
        type=int,
        default=0,
        metavar="N",
        help="start N local workers through torchrun's launcher API (laptops, CI, or one "
        "task per node under srun)",
    )
    group.add_argument("--site", metavar="NAME|PATH", help="site profile (default: auto)")
    group.add_argument(
        "--backend",
        default="",
        choices=["", "nccl", "gloo"],
        help="default: nccl on GPU, gloo on CPU",
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"rendezvous and collective timeout (default {DEFAULT_TIMEOUT_S:g})",
    )
    group.add_argument(
        "--keep-env",
        action="append",
        default=[],
        metavar="PATTERN",
        help="host variable (fnmatch pattern) to keep in the training environment",
    )
    group.add_argument(
        "--script",
        nargs=argparse.REMAINDER,
        metavar="FILE [ARGS]",
        help="run your own script with the resolved environment exported (must come last)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_training_arguments(parser)
    add_launch_arguments(parser)


def strip_nproc(argv: Sequence[str]) -> list[str]:
    """The command line without ``--nproc-per-node N``: what each local worker runs."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == "--script":
            out.extend(argv[i:])
            break
        if arg == "--nproc-per-node":
            skip = True
            continue
        if arg.startswith("--nproc-per-node="):
            continue
        out.append(arg)
    return out


def run(args: argparse.Namespace, argv: list[str]) -> int:
    startup.mark("launch")
    env = dict(os.environ)
    plan = build_plan(env, short_hostname(), site=args.site, keep=tuple(args.keep_env))
    if needs_reexec(plan, env):
        reexec_clean(plan, env, argv)
    startup.mark("plan")
    if args.script is not None and not args.script:
        raise LauncherError("--script needs a FILE", hint="train --script my_ddp.py --lr 0.1")
    if args.nproc_per_node:
        return launch_local_workers(plan, args, strip_nproc(argv))
    if args.script:
        return run_script(plan, args.script)
    return run_worker(plan, args)


def run_worker(plan: LaunchPlan, args: argparse.Namespace) -> int:
    import torch  # noqa: F401  (its import time is a startup phase of its own)

    from ddpimg import runtime
    from ddpimg.runtime.flight_recorder import TRACE_DIR
    from ddpimg.train import run_training

    startup.mark("imports")
    config = TrainConfig.from_namespace(args)
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
            devices_per_rank=config.devices_per_rank,
            trace_dir=str(config.out / TRACE_DIR),
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


def run_script(plan: LaunchPlan, script: list[str]) -> int:
    """Run the user's script with the plan exported, as a child so signals can be passed on
    and, under mpirun, this process stays the MPI rank."""
    from ddpimg import runtime

    runtime.check_interfaces(plan)
    runtime.apply_plan(plan)
    path, *script_args = script
    if not os.path.isfile(path):
        raise LauncherError(
            f"--script {path}: no such file", hint="give the path of a Python script"
        )
    child = subprocess.Popen([sys.executable, path, *script_args], env=dict(os.environ))
    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    return child.wait()


def launch_local_workers(plan: LaunchPlan, args: argparse.Namespace, worker_argv: list[str]) -> int:
    """One launcher per node (this process) starts N workers with torch.distributed.launcher's
    static rendezvous; the launcher's own rank and world size become node rank and node count."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from ddpimg import runtime

    topo = plan.topology
    if topo.local_world_size > 1:
        raise LauncherError(
            f"--nproc-per-node {args.nproc_per_node} with {topo.local_world_size} tasks on this "
            f"node ({topo.source}): each task would start its own workers",
            hint="run one task per node (srun --ntasks-per-node=1) with --nproc-per-node, or "
            "drop --nproc-per-node and let srun start one task per GPU",
        )
    runtime.check_interfaces(plan)
    master = runtime.apply_plan(plan)
    for name in RANK_VARIABLES:  # the launcher's own placement must not leak into workers
        os.environ.pop(name, None)
    # torch elastic's agent turns the signals it handles into a shutdown of the workers that
    # loses their exit statuses; the preemption signals go to the workers instead, which
    # checkpoint and exit with status 75, and the agent reports that status.
    preempt = parse_signals(args.preempt_signals)
    forward_to_children(preempt)
    port = runtime.rendezvous_port(plan)
    # The agent's log directory (workers' error files). Without one, torch makes a
    # /tmp/torchelastic_* directory per launch and leaves it behind; this one is removed.
    log_dir = tempfile.TemporaryDirectory(prefix="ddpimg-workers-")
    config = LaunchConfig(
        logs_specs=DefaultLogsSpecs(log_dir=log_dir.name),
        min_nodes=topo.world_size,
        max_nodes=topo.world_size,
        nproc_per_node=args.nproc_per_node,
        run_id=topo.job_key or f"ddpimg-{os.getpid()}",
        rdzv_backend="static",
        rdzv_endpoint=f"{master}:{port}",
        rdzv_configs={"rank": topo.rank, "timeout": int(args.timeout)},
        max_restarts=0,
        monitor_interval=0.5,
        signals_to_handle=",".join(
            name for name in ELASTIC_SIGNALS if name.removeprefix("SIG") not in preempt
        ),
    )
    program = (
        worker_argv[worker_argv.index("--script") + 1 :]
        if args.script
        else [
            "-m",
            "ddpimg",
            *worker_argv,
        ]
    )
    try:
        elastic_launch(config, sys.executable)(*program)
    except ChildFailedError as err:
        codes = [failure.exitcode for failure in err.failures.values()]
        return next((c for c in codes if c > 0), exitcodes.TRAINING_FAILED)
    finally:
        log_dir.cleanup()
    return exitcodes.OK
