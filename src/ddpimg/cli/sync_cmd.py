"""``ddpimg sync RUN...``: on a login node (with internet), upload what ``train --log-to``
wrote offline on the compute nodes: the W&B runs (W&B's own ``wandb sync``), the MLflow
runs of ``--out/mlruns`` (copied into the server ``MLFLOW_TRACKING_URI`` names, with
MLflow's API), and say where TensorBoard's event files and the profiler traces are
(TensorBoard reads files; nothing to upload). Running it again uploads nothing twice."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from ddpimg import exitcodes
from ddpimg.errors import DdpimgError, printable, report
from ddpimg.run_files import MANIFEST, METRICS
from ddpimg.trace_breakdown import PROFILE_DIR
from ddpimg.trackers.settings import MLFLOW_DIR, TENSORBOARD_DIR
from ddpimg.untrusted import inside


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="train runs that logged with --log-to: their directories, or the names of runs "
        "in ./runs (or $DDPIMG_RUNS), or latest",
    )


def _check_run(run: Path) -> None:
    if not (run / MANIFEST).is_file() and not (run / METRICS).is_file():
        raise DdpimgError(
            f"{run} is not a train run directory (no {MANIFEST} or {METRICS})",
            hint="give the --out directories of train runs",
        )


_INSIDE_HINT = (
    "ddpimg sync uploads only files inside the run directory: remove the link, or copy what "
    "it points at into the run if it belongs there; nothing was uploaded"
)


def _check_inside(path: Path, run: Path, tracker: str) -> None:
    """A DdpimgError when ``path`` (a tracker's folder in ``run``) is a link out of it."""
    if not inside(path, run):
        raise DdpimgError(
            f"{tracker}: {printable(str(path))} is a link to "
            f"{printable(os.path.realpath(path))}, outside {printable(str(run))}",
            hint=_INSIDE_HINT,
        )


def _tensorboard(run: Path, stream: TextIO) -> None:
    logs = run / TENSORBOARD_DIR
    if any(logs.glob("events.out.tfevents.*")):
        print(
            f"TensorBoard: {logs} (files only: tensorboard --logdir {logs}, or copy it where "
            "your TensorBoard runs)",
            file=stream,
        )
    if (run / PROFILE_DIR).is_dir():
        print(f"profiler traces: {run / PROFILE_DIR} (tensorboard --logdir it)", file=stream)


def _wandb(run: Path, env: Mapping[str, str], stream: TextIO) -> bool:
    from ddpimg.trackers.wandb_sync import is_synced, offline_runs, upload

    directories = offline_runs(run)
    if not directories:
        return True
    pending = [directory for directory in directories if not is_synced(directory)]
    done = len(directories) - len(pending)
    print(
        f"W&B: {len(directories)} offline run director{'y' if len(directories) == 1 else 'ies'}"
        f" in {run}, {done} uploaded before, {len(pending)} to upload",
        file=stream,
        flush=True,
    )
    if not pending:
        return True
    status = upload(run, pending, env)
    if status != 0 or not all(is_synced(directory) for directory in pending):
        report(
            f"W&B: wandb sync of {', '.join(str(d) for d in pending)} failed "
            f"(exit status {status})",
            hint="check WANDB_API_KEY (or wandb login) and WANDB_BASE_URL, then run "
            "ddpimg sync again: what was uploaded stays marked",
        )
        return False
    return True


def _mlflow(run: Path, env: Mapping[str, str], stream: TextIO) -> None:
    from ddpimg.progress_bar import ProgressBar
    from ddpimg.trackers.mlflow_sync import (
        copy_run,
        count_series,
        open_store,
        source_runs,
    )
    from ddpimg.trackers.mlflow_sync import store_uri as file_store_uri

    mlruns = run / MLFLOW_DIR
    if not mlruns.is_dir():
        return
    destination_uri = env.get("MLFLOW_TRACKING_URI", "").strip()
    source_uri = file_store_uri(mlruns)
    if not destination_uri:
        print(
            f"MLflow: {mlruns} not copied: set MLFLOW_TRACKING_URI to your tracking server",
            file=stream,
        )
        return
    if destination_uri.rstrip("/") == source_uri.rstrip("/"):
        print(f"MLflow: {mlruns} is the store MLFLOW_TRACKING_URI names", file=stream)
        return
    try:
        source, destination = open_store(source_uri), open_store(destination_uri)
        runs = list(source_runs(source))
        bar = ProgressBar(f"MLflow {run.name}", count_series(runs), "series", stream)
        for experiment, mlflow_run in runs:
            copied = copy_run(
                source, destination, experiment, mlflow_run, bar.advance, mlruns=mlruns
            )
            what = (
                f"{'created, ' if copied.created else ''}{copied.params} parameters, "
                f"{copied.values} metric values, {copied.artifacts} artifacts added"
                if copied.added
                else "nothing new"
            )
            print(
                f"MLflow: run {copied.source_run} -> {destination_uri} experiment "
                f"{experiment!r} run {copied.destination_run}: {what}",
                file=stream,
                flush=True,
            )
        bar.close()
    except DdpimgError:
        raise
    except Exception as err:  # MLflow's client raises many kinds; all mean the same here
        raise DdpimgError(
            f"MLflow: copying {mlruns} into MLFLOW_TRACKING_URI={destination_uri} failed "
            f"({type(err).__name__}: {err})",
            hint="check that the server is reachable (and its credentials, "
            "MLFLOW_TRACKING_TOKEN / _USERNAME), then run ddpimg sync again",
        ) from err


def _check_uploads(run: Path, env: Mapping[str, str]) -> None:
    """A DdpimgError when anything W&B's sync or the MLflow copy of ``run`` would upload
    lies outside it (through a link): checked for every run before anything is uploaded."""
    from ddpimg.trackers.mlflow_sync import (
        artifact_folder,
        local_artifacts,
        open_store,
        source_runs,
        store_uri,
    )
    from ddpimg.trackers.wandb_sync import offline_runs, uploaded_files

    for directory in offline_runs(run):
        _check_inside(directory, run, "W&B")
        try:
            uploaded_files(directory)
        except (OSError, ValueError) as err:
            where = printable(str(directory))
            raise DdpimgError(f"W&B: {where}: {err}", hint=_INSIDE_HINT) from err
    mlruns = run / MLFLOW_DIR
    if not mlruns.is_dir():
        return
    _check_inside(mlruns, run, "MLflow")
    if not env.get("MLFLOW_TRACKING_URI", "").strip():
        return  # nothing of it is copied
    try:
        source = open_store(store_uri(mlruns))
        for _, mlflow_run in source_runs(source):
            local_artifacts(artifact_folder(mlruns, mlflow_run), mlruns)
    except DdpimgError:
        raise
    except Exception as err:  # MLflow's file store raises many kinds on a damaged mlruns/
        raise DdpimgError(
            f"MLflow: {printable(str(mlruns))} cannot be read ({type(err).__name__}: {err})",
            hint="nothing was uploaded; fix or remove that folder and run ddpimg sync again",
        ) from err


def sync_runs(runs: list[Path], env: Mapping[str, str], stream: TextIO) -> int:
    for run in runs:
        _check_run(run)
    for run in runs:  # every run's files, before anything of any run is uploaded
        _check_uploads(run, env)
    ok = True
    for run in runs:
        _tensorboard(run, stream)
        ok = _wandb(run, env, stream) and ok
        _mlflow(run, env, stream)
    return exitcodes.OK if ok else exitcodes.TRAINING_FAILED


def run(args: argparse.Namespace, argv: list[str]) -> int:
    from ddpimg.runs.latest import resolve_run

    runs = [resolve_run(str(path)) for path in args.runs]
    return sync_runs(runs, os.environ, sys.stdout)
