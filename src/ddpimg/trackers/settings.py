"""Which trackers a run logs to and how they are set: pure functions of the flags and an
environment mapping; no tracker library is imported here.

Precedence, highest first (docs/usage.md, "Trackers and profiling"): the ``train`` flag
(``--log-to``, ``--project``, ``--run-name``, ``--run-group``, ``--wandb-entity``), the variable
(``DDPIMG_LOG_TO``; W&B's own ``WANDB_PROJECT``, ``WANDB_NAME``, ``WANDB_RUN_GROUP``,
``WANDB_ENTITY``; MLflow's ``MLFLOW_EXPERIMENT_NAME``), the site profile (its ``[env]``
table may set any of these variables; a variable the user exported wins over it, as for
every profile variable), the default.

W&B's mode: ``WANDB_MODE`` when set, otherwise offline. ddpimg does not probe for internet
access: compute nodes of the clusters it serves often have none, and a probe there either
fails fast or hangs on a firewall that drops packets, which a job must not wait for. A run
logged offline is uploaded afterwards from a login node (``ddpimg sync``); a site whose
compute nodes do reach W&B sets ``WANDB_MODE = "online"`` in its profile's ``[env]``.

MLflow: the server or store ``MLFLOW_TRACKING_URI`` names, otherwise a file store under
``--out/mlruns`` (files that ``ddpimg sync`` later copies into a server).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ddpimg.errors import DdpimgError

TENSORBOARD = "tensorboard"
WANDB = "wandb"
MLFLOW = "mlflow"
TRACKERS = (TENSORBOARD, WANDB, MLFLOW)
LOG_TO_VARIABLE = "DDPIMG_LOG_TO"
NONE = "none"

# tracker -> (the module it needs, the package that installs it)
PACKAGES: dict[str, tuple[str, str]] = {
    TENSORBOARD: ("tensorboard", "tensorboard"),
    WANDB: ("wandb", "wandb"),
    MLFLOW: ("mlflow", "mlflow-skinny"),
}
WANDB_MODES = ("offline", "online", "disabled")
DEFAULT_PROJECT = "ddpimg"
# Where each tracker writes under --out.
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
MLFLOW_DIR = "mlruns"
_REMOTE_SCHEMES = ("http", "https")


def parse_log_to(text: str, source: str = "--log-to") -> tuple[str, ...]:
    """The trackers a comma-separated list names, in its order, each once; ``""`` and
    ``none`` name none. An unknown name is a DdpimgError naming ``source`` (the flag or
    the variable the text came from) and the value."""
    names = [name for name in (part.strip().lower() for part in text.split(",")) if name]
    if names in ([], [NONE]):
        return ()
    chosen: list[str] = []
    for name in names:
        if name not in TRACKERS:
            raise DdpimgError(
                f"{source}: unknown tracker {name!r} in {text!r}",
                hint=f"a comma-separated list of {', '.join(TRACKERS)}, or {NONE}",
            )
        if name not in chosen:
            chosen.append(name)
    return tuple(chosen)


def log_to_setting(flag: str | None, env: Mapping[str, str]) -> tuple[str, ...]:
    """``--log-to`` when given, else ``DDPIMG_LOG_TO`` (the user's, or the site profile's
    ``[env]`` default), else none."""
    if flag is not None:
        return parse_log_to(flag)
    return parse_log_to(env.get(LOG_TO_VARIABLE, ""), LOG_TO_VARIABLE)


@dataclass(frozen=True)
class TrackerOptions:
    """The ``train`` flags that name a run in the trackers; None: not given."""

    project: str | None = None
    run_name: str | None = None
    run_group: str | None = None
    wandb_entity: str | None = None


@dataclass(frozen=True)
class TrackerSettings:
    """Everything the trackers of one run need, resolved and checked."""

    log_to: tuple[str, ...]
    out: Path
    project: str  # W&B project
    experiment: str  # MLflow experiment
    run_name: str
    run_group: str  # "" for none
    wandb_entity: str  # "" for W&B's default (the API key's user)
    wandb_mode: str  # one of WANDB_MODES
    mlflow_uri: str  # the tracking URI; a file store under --out unless MLFLOW_TRACKING_URI

    @property
    def mlflow_file_store(self) -> bool:
        return self.mlflow_uri.startswith("file:")

    def to_json(self) -> dict[str, Any]:
        """What manifest.json records under ``trackers``."""
        return {
            "log_to": list(self.log_to),
            "project": self.project,
            "experiment": self.experiment,
            "run_name": self.run_name,
            "run_group": self.run_group,
            "wandb_mode": self.wandb_mode,
            "mlflow_uri": self.mlflow_uri,
        }


def _first(*values: str | None) -> str:
    return next((value for value in values if value), "")


def resolve_settings(
    log_to: Sequence[str], out: Path, env: Mapping[str, str], options: TrackerOptions
) -> TrackerSettings:
    """The settings for ``log_to`` (already parsed); bad variables are DdpimgErrors
    naming them."""
    mode = env.get("WANDB_MODE", "").strip().lower() or "offline"
    mode = "offline" if mode == "dryrun" else mode  # W&B's older name for offline
    if WANDB in log_to and mode not in WANDB_MODES:
        raise DdpimgError(
            f"WANDB_MODE={env['WANDB_MODE']!r} is not a W&B mode",
            hint=f"one of {', '.join(WANDB_MODES)}; unset, ddpimg logs offline "
            "(upload later with ddpimg sync)",
        )
    uri = env.get("MLFLOW_TRACKING_URI", "").strip()
    if MLFLOW in log_to and uri:
        _check_tracking_uri(uri)
    project = _first(options.project, env.get("WANDB_PROJECT"), DEFAULT_PROJECT)
    return TrackerSettings(
        log_to=tuple(log_to),
        out=out,
        project=project,
        experiment=_first(options.project, env.get("MLFLOW_EXPERIMENT_NAME"), project),
        run_name=_first(options.run_name, env.get("WANDB_NAME"), out.resolve().name),
        run_group=_first(options.run_group, env.get("WANDB_RUN_GROUP")),
        wandb_entity=_first(options.wandb_entity, env.get("WANDB_ENTITY")),
        wandb_mode=mode,
        mlflow_uri=uri or (out.resolve() / MLFLOW_DIR).as_uri(),
    )


def _check_tracking_uri(uri: str) -> None:
    parts = urlsplit(uri)
    if parts.scheme in _REMOTE_SCHEMES and not parts.hostname:
        raise DdpimgError(
            f"MLFLOW_TRACKING_URI={uri!r} names no server",
            hint="http://HOST:PORT of an MLflow tracking server, or unset it to log into "
            f"--out/{MLFLOW_DIR}",
        )


def check_installed(
    log_to: Sequence[str],
    find_spec: Callable[[str], object | None] = importlib.util.find_spec,
) -> None:
    """A DdpimgError naming the package a chosen tracker needs and this Python lacks
    (found without importing it: every rank checks this at start-up)."""
    missing = [name for name in log_to if find_spec(PACKAGES[name][0]) is None]
    if missing:
        packages = " ".join(PACKAGES[name][1] for name in missing)
        raise DdpimgError(
            f"--log-to {','.join(log_to)}: {', '.join(missing)} needs the Python package "
            f"{packages}, which is not installed",
            hint=f"pip install {packages} (the ddpimg image has them), or leave "
            f"{', '.join(missing)} out of --log-to / {LOG_TO_VARIABLE}",
        )
