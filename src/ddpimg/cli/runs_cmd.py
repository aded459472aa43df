"""``ddpimg runs [SWEEP] [--root DIR] [--json]``: the runs under the runs root (``./runs``,
or ``$DDPIMG_RUNS``), oldest first: name, status, steps, loss (final, or the newest logged),
start and directory, the one ``runs/latest`` points at marked ``*`` (``ddpimg.runs.table``);
a sweep as one line (its points completed / running / failed, its best point's final eval
loss); then the runs submitted from this machine (``ddpimg submit``), as last seen by
``follow`` or ``fetch``, their directory ``host:path`` (a run fetched into the runs root is
listed once, there). ``ddpimg runs SWEEP``: the sweep's points, one a line. No torch is
imported: it answers at once on a login node."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ddpimg import exitcodes
from ddpimg.errors import printable
from ddpimg.remote.state import RemoteRun, load, state_path
from ddpimg.runs.names import LATEST, RUNS_VARIABLE, runs_root
from ddpimg.runs.records import list_runs
from ddpimg.runs.table import RunRow, local_rows, render
from ddpimg.sweep.listing import sweep_dirs, sweep_row


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "sweep",
        nargs="?",
        metavar="SWEEP",
        help="list this sweep's points instead: its name in the runs root, or its directory",
    )
    parser.add_argument(
        "--root",
        type=Path,
        metavar="DIR",
        help=f"the runs root to list (default: ${RUNS_VARIABLE}, else ./runs)",
    )
    parser.add_argument(
        "--json", action="store_true", help="one JSON object a run, a line each, instead"
    )


def run(args: argparse.Namespace, argv: list[str]) -> int:
    root = args.root if args.root is not None else runs_root(os.environ)
    if args.sweep is not None:
        return _points(args.sweep, root, as_json=args.json)
    try:
        latest: str | None = os.readlink(root / LATEST)
    except OSError:
        latest = None
    remote = load(state_path(os.environ))
    # A fetched run is listed once, as the cluster's: its local copy is the same run,
    # however the path to it is spelled (relative, through a link).
    fetched = {os.path.realpath(run.local_dir) for run in remote}
    local = local_rows(list_runs(root), latest) + [sweep_row(path) for path in sweep_dirs(root)]
    local.sort(key=lambda row: (row.started is None, row.started or "", row.name))
    rows = [row for row in local if os.path.realpath(row.directory) not in fetched]
    rows += [_remote_row(run) for run in remote]
    if args.json:
        for row in rows:
            print(json.dumps(row.to_json()))
    elif rows:
        print(render(rows))
    else:
        print(f"no runs in {printable(str(root))} (train without --out starts one there)")
    return exitcodes.OK


def _remote_row(run: RemoteRun) -> RunRow:
    """A submitted run as last seen: the manifest's status once followed to its end or
    fetched, else Slurm's state."""
    status = run.status or run.state.lower() or "submitted"
    if run.is_sweep:
        status = f"sweep of {len(run.points)} points: {status}"
    where = f"{run.host}:{run.run_dir or run.workdir}"
    return RunRow(run.name, status, run.steps, run.loss, run.submitted_utc, where)


def _points(text: str, root: Path, *, as_json: bool) -> int:
    """``ddpimg runs SWEEP``: the sweep's points as a table and its verdict, or JSON lines."""
    from ddpimg.errors import DdpimgError
    from ddpimg.sweep.listing import point_rows
    from ddpimg.sweep.results import is_sweep, read_results, verdict
    from ddpimg.sweep.table import points_table

    path = Path(text)
    if not os.path.lexists(path) and os.sep not in text:
        path = root / text
    if not is_sweep(path):
        raise DdpimgError(
            f"{printable(text)}: not a sweep's directory (no sweep.json in {printable(str(path))})",
            hint=f"ddpimg runs lists the runs and sweeps in {root}/; a sweep submitted from here "
            "is read after ddpimg fetch SWEEP (ddpimg follow SWEEP shows it meanwhile)",
        )
    results = read_results(path)
    if as_json:
        for row in point_rows(results):
            print(json.dumps(row))
        return exitcodes.OK
    print(points_table(results))
    print(f"sweep {printable(results.file.name)}: {verdict(results)}")
    return exitcodes.OK
