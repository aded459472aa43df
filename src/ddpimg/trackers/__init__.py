"""Experiment trackers (``--log-to tensorboard,wandb,mlflow``): rank 0 hands every
metrics.jsonl record to TensorBoard, Weights & Biases and MLflow, and the manifest's
description of the run as their config / parameters.

The interface, for the bundled trainers and for a user's script run alike:

* ``parse_log_to(text)`` / ``log_to_setting(flag, env)``: which trackers (pure);
* ``check_trackers(log_to, out, env, options)``: the packages installed and the settings
  valid, on every rank at start-up, before anything is written (a DdpimgError otherwise);
* ``open_trackers(log_to, out, manifest, env, resumed)``: rank 0 opens the runs and gets a
  ``Trackers``; ``RunRecorder`` (``ddpimg.train.outputs``) takes it and passes on every
  record it writes to metrics.jsonl, and the run's end (``Trackers.finish``).

Each tracker lives in a module of its own; ``settings`` holds the precedence of flags,
variables and site profile; ``fanout`` the thread that keeps trackers off the training
loop; ``state`` the run ids that let a resumed job continue the same runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ddpimg import exitcodes
from ddpimg.errors import DdpimgError
from ddpimg.trackers.fanout import Tracker, Trackers
from ddpimg.trackers.records import description
from ddpimg.trackers.settings import (
    LOG_TO_VARIABLE,
    MLFLOW,
    TENSORBOARD,
    TRACKERS,
    WANDB,
    TrackerOptions,
    TrackerSettings,
    check_installed,
    log_to_setting,
    parse_log_to,
    resolve_settings,
)
from ddpimg.trackers.state import read_state, write_state

__all__ = [
    "LOG_TO_VARIABLE",
    "TRACKERS",
    "TrackerOptions",
    "Trackers",
    "check_trackers",
    "log_to_setting",
    "open_trackers",
    "parse_log_to",
]

# (settings, the run's description, the run it continues (None: a new one), the step the
# run resumes from) -> the tracker, its run open.
Opener = Callable[
    [TrackerSettings, Mapping[str, Any], Mapping[str, Any] | None, int | None], Tracker
]
# What a failure to open each tracker most likely means.
_OPEN_HINTS = {
    TENSORBOARD: "check that --out is writable",
    WANDB: "check WANDB_MODE (offline needs no account; online needs WANDB_API_KEY and a "
    "reachable server) and --project / --wandb-entity",
    MLFLOW: "check MLFLOW_TRACKING_URI (unset: a file store under --out/mlruns) and that its "
    "server is reachable",
}


def check_trackers(
    log_to: Sequence[str], out: Path, env: Mapping[str, str], options: TrackerOptions
) -> TrackerSettings:
    """The trackers' settings, checked: a DdpimgError names a missing package or a bad
    variable. Imports no tracker."""
    check_installed(log_to)
    return resolve_settings(log_to, out, env, options)


def _opener(name: str) -> Opener:
    if name == TENSORBOARD:
        from ddpimg.trackers.tensorboard_tracker import TensorBoardTracker

        return TensorBoardTracker.open
    if name == WANDB:
        from ddpimg.trackers.wandb_tracker import WandbTracker

        return WandbTracker.open
    from ddpimg.trackers.mlflow_tracker import MlflowTracker

    return MlflowTracker.open


def _resume_step(manifest: Mapping[str, Any]) -> int | None:
    resumed_from = manifest.get("resumed_from")
    step = resumed_from.get("step") if isinstance(resumed_from, Mapping) else None
    return step if isinstance(step, int) else None


def open_trackers(
    log_to: Sequence[str],
    out: Path,
    manifest: Mapping[str, Any],
    env: Mapping[str, str],
    resumed: bool,
    *,
    options: TrackerOptions | None = None,
    stream: TextIO | None = None,
) -> Trackers:
    """Open a run in each of ``log_to`` for the run writing into ``out`` (rank 0 only).

    ``manifest`` gives the runs their config / parameters (and, with ``resumed``, the step
    resumed from: its ``resumed_from.step``); ``resumed``: the run continues from one of
    ``out``'s checkpoints, so each tracker continues the run ``out/trackers.json`` names. A
    tracker that cannot be opened is a DdpimgError naming it (the ones opened before are
    closed). With no tracker in ``log_to`` the result does nothing.
    """
    stream = sys.stderr if stream is None else stream
    settings = check_trackers(log_to, out, env, options or TrackerOptions())
    described = description(manifest)
    previous = read_state(out) if resumed else None
    resume_step = _resume_step(manifest) if resumed else None
    opened: list[Tracker] = []
    state: dict[str, dict[str, Any]] = {}
    for name in settings.log_to:
        try:
            tracker = _opener(name)(
                settings,
                described,
                None if previous is None else previous.get(name, {}),
                resume_step,
            )
        except Exception as err:
            for done in opened:
                done.finish("failed", exitcodes.USAGE)
            raise DdpimgError(
                f"--log-to {name}: cannot open a run ({type(err).__name__}: {err})",
                hint=_OPEN_HINTS[name],
            ) from err
        opened.append(tracker)
        state[name] = dict(tracker.state)
    if opened:
        write_state(out, state)
        print(
            f"ddpimg: logging to {', '.join(_where(name, settings) for name in settings.log_to)}",
            file=stream,
            flush=True,
        )
    return Trackers(opened, stream)


def _where(name: str, settings: TrackerSettings) -> str:
    out = settings.out
    if name == TENSORBOARD:
        return f"TensorBoard ({out / 'tensorboard'})"
    if name == WANDB:
        upload = f"; upload: ddpimg sync {out}" if settings.wandb_mode == "offline" else ""
        return f"W&B {settings.wandb_mode} ({out / 'wandb'}{upload})"
    return f"MLflow ({settings.mlflow_uri})"
