"""``train``'s whole parser: what it trains (``ddpimg.cli.train_options``), how it launches,
and a sweep's options (``ddpimg.cli.sweep_args``). Apart from the command (``train_cmd``) so
that a sweep's plan parses each point with it without importing the command that runs the
sweep."""

from __future__ import annotations

import argparse

from ddpimg.cli.launch_options import (
    add_local_rank_argument,
    add_nproc_argument,
    add_site_options,
)
from ddpimg.cli.sweep_args import PARALLEL, add_sweep_arguments
from ddpimg.cli.train_options import add_training_arguments


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
    add_sweep_arguments(parser, PARALLEL)
