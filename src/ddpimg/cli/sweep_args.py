"""The sweep options of ``train``, ``ddpimg sbatch`` and ``ddpimg submit`` (``--sweep``,
``--trials``, ``--sweep-seed``, ``--max-points``, and ``--parallel`` or ``--max-parallel``):
declared once here, apart from the sweep's plan (``ddpimg.cli.sweep_options``), which parses
each point with train's whole parser, these options included."""

from __future__ import annotations

import argparse
from typing import Any

from ddpimg.sweep.spec import DEFAULT_MAX_POINTS, SweepError

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
