"""``ddpimg fetch RUN [--checkpoints newest]``: a run submitted from here brought back into
its local directory (``./runs/NAME``, or under ``$DDPIMG_RUNS``): manifest.json,
metrics.jsonl, the trackers' offline runs, plots, the job's log and script, and with
``--checkpoints newest`` the newest checkpoint. A plot of the run is drawn beside them when
matplotlib is installed. Fetch again to bring the files up to date. A sweep
(``ddpimg submit --sweep``) comes as its sweep.json and every point in a directory of its own
under ``./runs/NAME``, each with its array task's log, and its plot is the sweep's.

What the login node sends is written only under those names, inside that directory: anything
else it sends is skipped and named.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ddpimg import exitcodes
from ddpimg.cli import remote_common
from ddpimg.errors import printable
from ddpimg.remote import state
from ddpimg.remote.fetch import DEFAULT_MAX_GB, fetch_run
from ddpimg.remote.state import RemoteRun
from ddpimg.remote.tree import describe_size
from ddpimg.runs.records import read_run

PLOT = "plot.png"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("run", metavar="RUN", help="a submitted run's name, or latest")
    parser.add_argument(
        "--checkpoints",
        choices=("none", "newest"),
        default="none",
        help="newest: also the newest checkpoint (default: none)",
    )
    parser.add_argument(
        "--max-size", type=float, default=DEFAULT_MAX_GB, metavar="GB",
        help=f"stop past this many GB (default {DEFAULT_MAX_GB})",
    )  # fmt: skip


def run(args: argparse.Namespace, argv: list[str]) -> int:
    remote_common.check_positive(args.max_size, "--max-size")
    path, found = remote_common.pick(args.run)
    local = Path(found.local_dir)
    if found.is_sweep:
        return _fetch_sweep(args, path, found)
    with remote_common.connect(found.host) as transport:
        fetched = fetch_run(
            transport,
            found,
            local,
            checkpoints=args.checkpoints == "newest",
            max_bytes=int(args.max_size * 1e9),
        )
    unpacked = fetched.unpacked
    remote_common.say(
        f"fetched {found.name} into {printable(str(local))}: {len(unpacked.written)} files, "
        f"{describe_size(unpacked.size)}"
        + (f", checkpoint {fetched.checkpoint}" if fetched.checkpoint else "")
    )
    if fetched.changing:
        remote_common.say(
            f"note: some of {found.name}'s files changed while they were packed (the run goes "
            "on); fetch again once it ends"
        )
    if unpacked.skipped:
        shown_names = ", ".join(repr(name) for name in unpacked.skipped[:5])
        more = f" and {len(unpacked.skipped) - 5} more" if len(unpacked.skipped) > 5 else ""
        remote_common.say(f"warning: skipped what {found.host} sent unasked: {shown_names}{more}")
    record = read_run(local)
    state.update(path, found.name, status=record.status, steps=record.steps, loss=record.loss)
    _plot(local)
    return exitcodes.OK


def _plot(local: Path) -> None:
    """Draw the run beside its files, if matplotlib is there (it is optional)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        shown = printable(str(local))
        remote_common.say(f"ddpimg plot {shown} draws it into {PLOT} (needs matplotlib)")
        return
    from ddpimg.errors import DdpimgError
    from ddpimg.plot import plot_runs
    from ddpimg.plot import read_run as read_plotted
    from ddpimg.sweep.results import is_sweep

    try:
        if is_sweep(local):
            from ddpimg.sweep.plot import plot_sweep

            plot_sweep(local, local / PLOT)
        else:
            plot_runs([read_plotted(local)], local / PLOT)
    except DdpimgError as err:
        remote_common.say(f"warning: no plot: {err.message}")
        return
    remote_common.say(f"plotted {printable(str(local / PLOT))}")


def _fetch_sweep(args: argparse.Namespace, path: Path, found: RemoteRun) -> int:
    """``ddpimg fetch SWEEP``: the sweep's files and every point's, then its plot."""
    from ddpimg.remote.fetch import fetch_sweep
    from ddpimg.sweep.results import counts_words, read_results

    local = Path(found.local_dir)
    with remote_common.connect(found.host) as transport:
        fetched = fetch_sweep(
            transport,
            found,
            local,
            checkpoints=args.checkpoints == "newest",
            max_bytes=int(args.max_size * 1e9),
        )
    waiting = f"; not started yet: {', '.join(fetched.missing)}" if fetched.missing else ""
    remote_common.say(
        f"fetched {found.name} into {printable(str(local))}: {len(fetched.points)} of "
        f"{len(found.points)} points, {fetched.files} files, {describe_size(fetched.size)}"
        + waiting
    )
    if fetched.skipped:
        shown_names = ", ".join(repr(name) for name in fetched.skipped[:5])
        more = f" and {len(fetched.skipped) - 5} more" if len(fetched.skipped) > 5 else ""
        remote_common.say(f"warning: skipped what {found.host} sent unasked: {shown_names}{more}")
    results = read_results(local)
    best = results.best()
    state.update(
        path,
        found.name,
        status=counts_words(results.counts(), len(results.points)),
        loss=None if best is None else best[2],
    )
    _plot(local)
    return exitcodes.OK
