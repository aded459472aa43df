"""``ddpimg plot RUN_DIR... -o FILE.png``: loss and accuracy per epoch of several runs,
throughput and scaling efficiency against the number of processes (``ddpimg.plot``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ddpimg import exitcodes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN_DIR",
        help="train runs (each with metrics.jsonl): their directories, or the names of runs "
        "in ./runs (or $DDPIMG_RUNS), or latest; or one sweep (train --sweep): its points "
        "overlaid, and the final eval loss against each swept option",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        required=True,
        metavar="FILE.png",
        help="the image to write (format from the suffix: .png, .pdf, .svg); an existing "
        "file is replaced only with --force",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace the file -o names if it exists"
    )


def run(args: argparse.Namespace, argv: list[str]) -> int:
    from ddpimg.fsio import check_new
    from ddpimg.plot import plot_runs, read_run, threads_caveat
    from ddpimg.runs.latest import resolve_run
    from ddpimg.sweep.results import is_sweep

    check_new(args.output, force=args.force, flag="-o")
    paths = [resolve_run(str(path)) for path in args.runs]
    if len(paths) == 1 and is_sweep(paths[0]):  # a sweep's points (ddpimg.sweep.plot)
        from ddpimg.sweep.plot import plot_sweep

        plot_sweep(paths[0], args.output)
        print(f"wrote {args.output}")
        return exitcodes.OK
    runs = [read_run(path) for path in paths]
    plot_runs(runs, args.output)
    print(f"wrote {args.output}")
    caveat = threads_caveat(runs)
    if caveat:
        print(f"ddpimg: note: {caveat}", file=sys.stderr)
    return exitcodes.OK
