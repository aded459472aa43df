"""What ``train --script`` does before the script's process starts: the variables the script
gets beyond the plan's exports, the options for its boot, and the command line that
replaces ``train`` (exec, same PID: see ``ddpimg.script``)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence

from ddpimg.errors import DdpimgError, LauncherError
from ddpimg.plan import LaunchPlan
from ddpimg.runs.names import runs_root
from ddpimg.script.options import ScriptOptions
from ddpimg.train.preempt_signals import parse_signals

BOOT_MODULE = "ddpimg.script.boot"


def script_exports(plan: LaunchPlan, env: Mapping[str, str]) -> dict[str, str]:
    """Variables a script gets on top of the plan's exports.

    SLURM_NTASKS_PER_NODE when a Slurm step places the same number of tasks on every node
    and srun did not export it (``srun -n 2``): PyTorch Lightning refuses a SLURM_NTASKS
    without it ("You set `--ntasks=2` ... HINT: Use `--ntasks-per-node=2`"), although the
    layout is well defined.
    """
    per_node = plan.topology.tasks_per_node
    if per_node and len(set(per_node)) == 1 and "SLURM_NTASKS_PER_NODE" not in env:
        return {"SLURM_NTASKS_PER_NODE": str(per_node[0])}
    return {}


def check_script(script: Sequence[str]) -> None:
    """``--script FILE [ARGS]``: FILE given and a file."""
    if not script:
        raise LauncherError("--script needs a FILE", hint="train --script my_ddp.py --lr 0.1")
    if not os.path.isfile(script[0]):
        raise LauncherError(
            f"--script {script[0]}: no such file", hint="give the path of a Python script"
        )


def script_options(plan: LaunchPlan, args: argparse.Namespace) -> ScriptOptions:
    """The boot's options from ``train``'s flags and the plan; the numbers checked."""
    if args.timeout <= 0:
        raise DdpimgError(
            f"--timeout must be more than 0 seconds, got {args.timeout:g}",
            hint="the default is 600; a rank silent for that long is taken as lost",
        )
    if args.preempt_check_every < 1:
        raise DdpimgError(
            f"--preempt-check-every must be at least 1, got {args.preempt_check_every}",
            hint="1 checks every step",
        )
    from ddpimg.trackers import TrackerOptions, check_trackers, log_to_setting

    env = plan.child_environment(os.environ)  # with the site profile's [env] defaults
    log_to = log_to_setting(args.log_to, env)
    trackers = TrackerOptions(
        project=args.project,
        run_name=args.run_name,
        run_group=args.run_group,
        wandb_entity=args.wandb_entity,
    )
    # Without --out the run's own directory under the runs root is chosen at start.
    runs = None if args.out is not None else runs_root(env)
    where = args.out if runs is None else runs
    check_trackers(log_to, where, env, trackers)  # on every rank, before anything runs
    return ScriptOptions(
        out="" if runs is not None else str(args.out),
        runs="" if runs is None else str(runs),
        timeout_s=args.timeout,
        watch=not args.no_watch,
        record=not args.no_record,
        integrations=not args.no_integrations,
        preempt_signals=parse_signals(args.preempt_signals),
        preempt_check_every=args.preempt_check_every,
        resume=args.resume,
        master_via_mpi=plan.needs_runtime_master,
        rank_is_task=plan.topology.rank_is_task,
        site_path=plan.site.path,
        run_info=plan.to_json(),
        log_to=log_to,
        tracker_options=dataclasses.asdict(trackers),
    )


def boot_program(path: str, args: Sequence[str]) -> list[str]:
    """The interpreter arguments that run the script behind its boot."""
    return ["-m", BOOT_MODULE, path, *args]


def script_argv(path: str, args: Sequence[str]) -> list[str]:
    """The command line that replaces ``train``."""
    return [sys.executable, *boot_program(path, args)]
