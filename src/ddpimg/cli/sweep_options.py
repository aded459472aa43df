"""A sweep's plan for ``train``, ``ddpimg sbatch`` and ``ddpimg submit`` (their sweep options:
``ddpimg.cli.sweep_args``): its points, each checked by ``train``'s own parser and
configuration check before anything starts (``ddpimg.sweep``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

from ddpimg.cli.sweep_args import PARALLEL
from ddpimg.cli.train_parser import add_arguments as add_train_arguments
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
    Point,
    Sweep,
    SweepError,
    parse_sweep,
    same_definition,
    sweep_document,
    sweep_name,
)


class _Refusing(argparse.ArgumentParser):
    """``train``'s parser, whose usage errors are raised (argparse's own words) rather than
    printed with an exit."""

    def error(self, message: str) -> NoReturn:
        raise DdpimgError(message, hint="train --help lists the options and their values")


def train_parser() -> argparse.ArgumentParser:
    parser = _Refusing(prog="train", allow_abbrev=False, add_help=False)
    add_train_arguments(parser)
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
