"""The sweep options of ``train``, ``ddpimg sbatch`` and ``ddpimg submit`` (``--sweep``,
``--trials``, ``--sweep-seed``, ``--max-points``, and ``--parallel`` or ``--max-parallel``),
and a sweep's plan: its points, each checked by ``train``'s own parser and configuration
check before anything starts (``ddpimg.sweep``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

from ddpimg.errors import DdpimgError
from ddpimg.runs.names import DEFAULT_ROOT, runs_root, stem_of
from ddpimg.sweep.command import (
    SWEEP_OPTIONS,
    PointCommands,
    SweptCommand,
    check_points,
    option_forms,
    split_command,
)
from ddpimg.sweep.spec import (
    DEFAULT_MAX_POINTS,
    Point,
    Sweep,
    SweepError,
    parse_sweep,
    same_definition,
    sweep_document,
    sweep_name,
)

PARALLEL = "--parallel"
MAX_PARALLEL = "--max-parallel"


def add_sweep_arguments(parser: argparse.ArgumentParser | Any, parallel: str) -> None:
    """The sweep's options; ``parallel``: ``--parallel`` (points at once here) or
    ``--max-parallel`` (array tasks at once on Slurm)."""
    group = parser.add_argument_group(
        "sweeps: many runs in one command, each point in its own run directory"
    )
    group.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="run the command once per value (repeat: every combination); NAME is a train "
        "option (lr, seed, global-batch-size) or a {NAME} in a train --script's arguments; "
        "NAME=log:LOW:HIGH, uniform:LOW:HIGH or int:LOW:HIGH draws --trials values",
    )
    group.add_argument(
        "--trials", type=int, default=None, metavar="N", help="draws of the --sweep ranges"
    )
    group.add_argument(
        "--sweep-seed",
        type=int,
        default=None,
        metavar="S",
        help="seed of the draws: the same seed, the same points (default: 0)",
    )
    group.add_argument(
        "--max-points",
        type=int,
        default=DEFAULT_MAX_POINTS,
        metavar="N",
        help="refuse a sweep of more points than this (default: %(default)s)",
    )
    if parallel == PARALLEL:
        group.add_argument(
            PARALLEL,
            type=int,
            default=1,
            metavar="K",
            help="run K points at once on this machine, each with its share of the CPUs "
            "(default: one after another)",
        )
    else:
        group.add_argument(
            MAX_PARALLEL,
            type=int,
            default=None,
            metavar="K",
            help="at most K array tasks at once (#SBATCH --array=...%%K; default: Slurm's choice)",
        )


def sweep_given(args: argparse.Namespace) -> bool:
    """Whether ``args`` asks for a sweep; SweepError for a sweep option without ``--sweep``."""
    if args.sweep:
        return True
    for flag, value, unset in (
        ("--trials", args.trials, None),
        ("--sweep-seed", args.sweep_seed, None),
        ("--max-points", args.max_points, DEFAULT_MAX_POINTS),
        (PARALLEL, getattr(args, "parallel", 1), 1),
        (MAX_PARALLEL, getattr(args, "max_parallel", None), None),
    ):
        if value != unset:
            raise SweepError(
                f"{flag} applies to a sweep, and no --sweep is given",
                hint=f"add --sweep NAME=V1,V2, or drop {flag}",
            )
    return False


class _Refusing(argparse.ArgumentParser):
    """``train``'s parser, whose usage errors are raised (argparse's own words) rather than
    printed with an exit."""

    def error(self, message: str) -> NoReturn:
        raise DdpimgError(message, hint="train --help lists the options and their values")


def train_parser() -> argparse.ArgumentParser:
    from ddpimg.cli import train_cmd

    parser = _Refusing(prog="train", allow_abbrev=False, add_help=False)
    train_cmd.add_arguments(parser)
    return parser


def _checker(
    parser: argparse.ArgumentParser, env: Mapping[str, str], *, in_job: bool
) -> Callable[[list[str]], object]:
    """Parse a point's words and check its configuration as ``train`` does at start-up. In a
    job (``in_job``) the trackers are not checked here: the image has the packages the
    machine that renders the job may lack."""
    from ddpimg.cli.train_options import train_config

    def check(words: list[str]) -> object:
        args = parser.parse_args(words)
        if args.script is None:
            if in_job:
                args.log_to = "none"
            return train_config(args, env)
        return args

    return check


@dataclass(frozen=True)
class SweepPlan:
    """A sweep ready to run: its definition, its points, how each point's command is
    spelled, its name and directory, and ``sweep.json``'s content."""

    sweep: Sweep
    command: SweptCommand
    commands: PointCommands
    points: tuple[Point, ...]
    name: str
    directory: str
    document: dict[str, Any]

    def same(self, document: Mapping[str, Any]) -> bool:
        return same_definition(document, self.sweep, self.command.shared)


def plan_sweep(
    args: argparse.Namespace,
    words: Sequence[str],
    env: Mapping[str, str],
    *,
    in_job: bool,
) -> SweepPlan:
    """The sweep ``args`` define over the train command ``words`` (its arguments after
    ``train``). Every point is checked before anything starts. The sweep's directory: the
    command's ``--out``, else the sweep's name under the runs root (``runs/NAME`` in the
    job's directory, for a job)."""
    sweep = parse_sweep(
        args.sweep, trials=args.trials, seed=args.sweep_seed, max_points=args.max_points
    )
    command = split_command(words, () if in_job else SWEEP_OPTIONS)
    parser = train_parser()
    try:
        base = parser.parse_args([*command.options, *command.script])
    except DdpimgError as err:
        raise SweepError(f"the train command is refused: {err.message}", hint=err.hint) from err
    if in_job and base.sweep:
        raise SweepError(
            "--sweep is given to train inside the job: that would run the whole sweep in "
            "every array task",
            hint="give --sweep to ddpimg sbatch (or submit): ddpimg sbatch --sweep lr=0.1,0.01 "
            "-- train ...",
        )
    commands = PointCommands(command, sweep, option_forms(parser))
    points = sweep.points()
    check_points(commands, points, _checker(parser, env, in_job=in_job))
    stem = base.trainer if base.script is None else PurePosixPath(base.script[0]).stem
    name = sweep_name(stem_of(stem), sweep, command.shared)
    if command.out is not None:
        directory = command.out
    else:
        directory = f"{DEFAULT_ROOT}/{name}" if in_job else str(runs_root(env) / name)
    document = sweep_document(name, sweep, command.shared, points)
    return SweepPlan(sweep, command, commands, points, name, directory, document)


def completed_points(plan: SweepPlan, where: Path) -> set[str]:
    """The names of the plan's points whose runs completed in ``where`` (the sweep's
    directory as seen from here)."""
    from ddpimg.runs.records import COMPLETED, read_run

    done: set[str] = set()
    for point in plan.points:
        path = where / point.name
        if path.is_dir() and not path.is_symlink() and read_run(path).status == COMPLETED:
            done.add(point.name)
    return done


def run_local_sweep(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """``train --sweep ...``: every point a ``train`` process of its own, here
    (``ddpimg.sweep.local``). ``argv``: the command's words, ``train`` first."""
    import os
    import sys

    from ddpimg.sweep.local import LocalSweep, run_local
    from ddpimg.topology import resolve_topology

    env = dict(os.environ)
    topology = resolve_topology(env)
    if topology.world_size > 1:
        raise SweepError(
            f"train --sweep started as one of {topology.world_size} ranks "
            f"({topology.source}): every rank would run the whole sweep",
            hint="start train --sweep once (its points start their own processes; "
            "--nproc-per-node N gives each point N); on Slurm, ddpimg sbatch --sweep runs "
            "the points as an array",
        )
    if args.parallel < 1:
        raise SweepError(f"{PARALLEL} {args.parallel}: must be at least 1", hint=f"{PARALLEL} 2")
    plan = plan_sweep(args, argv[1:], env, in_job=False)
    program = [sys.executable, "-m", "ddpimg", "train"]
    sweep = LocalSweep(
        plan.name,
        Path(plan.directory),
        plan.document,
        plan.points,
        argv=lambda point, out: [*program, *plan.commands.words(point, out)],
        same=plan.same,
    )
    cpus = len(os.sched_getaffinity(0))
    return run_local(sweep, parallel=args.parallel, env=env, cpus=cpus)
