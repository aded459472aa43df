"""``ddpimg plot RUN... [-o FILE]``: one run's loss, learning rate, throughput and time per
step over its steps, or several runs overlaid with the scaling panels when their world sizes
differ (``ddpimg.plot``); or one sweep's points overlaid, with the final eval loss against each
swept option (``ddpimg.sweep.plot``). One run or sweep is drawn into ``RUN/plot.png`` unless
``-o`` says otherwise; several runs need ``-o``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ddpimg import exitcodes
from ddpimg.errors import DdpimgError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="train runs (each with metrics.jsonl): their directories, or the names of runs "
        "in ./runs (or $DDPIMG_RUNS), or latest; or one sweep (train --sweep): its points "
        "overlaid, and the final eval loss against each swept option",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="FILE",
        help="the image to write, its format from the suffix: .png, .svg, .pdf (default for "
        "one run or sweep: RUN/plot.png, redrawn each time; several runs need -o); an "
        "existing file is replaced only with --force",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace the file -o names if it exists"
    )


def run(args: argparse.Namespace, argv: list[str]) -> int:
    from ddpimg.fsio import check_new
    from ddpimg.plot import DEFAULT_NAME, plot_runs, read_run, threads_caveat
    from ddpimg.runs.latest import resolve_run
    from ddpimg.sweep.results import is_sweep

    directories = [resolve_run(str(path)) for path in args.runs]
    output = args.output
    if output is None:
        if len(directories) > 1:
            raise DdpimgError(
                f"{len(directories)} runs and no -o: say where their plot goes",
                hint="add -o FILE.png (or .svg); a single run is drawn into RUN/plot.png",
            )
        output = directories[0] / DEFAULT_NAME
    else:
        check_new(output, force=args.force, flag="-o")
    if len(directories) == 1 and is_sweep(directories[0]):  # a sweep's points (ddpimg.sweep.plot)
        from ddpimg.sweep.plot import plot_sweep

        plot_sweep(directories[0], output)
        print(f"wrote {output}")
        return exitcodes.OK
    runs = [read_run(directory) for directory in directories]
    plot_runs(runs, output)
    print(f"wrote {output}")
    caveat = threads_caveat(runs)
    if caveat:
        print(f"ddpimg: note: {caveat}", file=sys.stderr)
    return exitcodes.OK
