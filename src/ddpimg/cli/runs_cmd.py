"""``ddpimg runs [--root DIR] [--json]``: the runs under the runs root (``./runs``, or
``$DDPIMG_RUNS``), oldest first: name, status, steps, loss (final, or the newest logged),
start and directory, the one ``runs/latest`` points at marked ``*`` (``ddpimg.runs.table``);
then the runs submitted from this machine (``ddpimg submit``), as last seen by ``follow`` or
``fetch``, their directory ``host:path`` (a run fetched into the runs root is listed once,
there). No torch is imported: it answers at once on a login node."""

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
    try:
        latest: str | None = os.readlink(root / LATEST)
    except OSError:
        latest = None
    remote = load(state_path(os.environ))
    # A fetched run is listed once, as the cluster's: its local copy is the same run,
    # however the path to it is spelled (relative, through a link).
    fetched = {os.path.realpath(run.local_dir) for run in remote}
    rows = [
        row
        for row in local_rows(list_runs(root), latest)
        if os.path.realpath(row.directory) not in fetched
    ] + [_remote_row(run) for run in remote]
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
    where = f"{run.host}:{run.run_dir or run.workdir}"
    return RunRow(run.name, status, run.steps, run.loss, run.submitted_utc, where)
