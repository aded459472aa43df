"""The names of run directories, and where they go: pure functions of the environment, the
trainer or script, and the clock.

A name is ``STEM-TAG`` with ``.N`` (N >= 2) for a second run of the same stem and tag:
``STEM`` the trainer (``mnist``) or the script's file name without ``.py``, ``TAG`` the Slurm
job id (``1234567``, or ``1234567_3`` for task 3 of an array job: Slurm's own ``%A_%a``)
where there is one, else the local start time (``20261129-031500``). Names sort by start
within a stem. The job ids come from the environment and become path components, so they
are checked first: digits only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ddpimg.errors import DdpimgError

RUNS_VARIABLE = "DDPIMG_RUNS"
DEFAULT_ROOT = "runs"
LATEST = "latest"
TIME_FORMAT = "%Y%m%d-%H%M%S"
MAX_STEM = 64
# A Slurm job id is a 32-bit number; 20 digits leave room for any scheduler's and stop a
# value that is not one from making a long path.
MAX_ID_DIGITS = 20
# Job-id variables, in the order they are used: an array task, else the job.
ARRAY_JOB, ARRAY_TASK, JOB = "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID"

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_TIME_TAG = re.compile(r"\d{8}-\d{6}")
_JOB_TAG = re.compile(rf"\d{{1,{MAX_ID_DIGITS}}}(?:_\d{{1,{MAX_ID_DIGITS}}})?")
_SUFFIX = re.compile(r"\.([2-9]|[1-9]\d+)")


@dataclass(frozen=True, order=True)
class RunName:
    """A run directory's name, split: ``tag`` (job id or start time) and ``number`` (1 for
    the first run of that stem and tag). Ordered by start (time tags sort as text)."""

    tag: str
    number: int

    @property
    def from_scheduler(self) -> bool:
        return _TIME_TAG.fullmatch(self.tag) is None


def runs_root(env: Mapping[str, str]) -> Path:
    """Where runs without ``--out`` go: ``$DDPIMG_RUNS`` (the user's, else the site
    profile's ``[env]``), else ``./runs``."""
    value = env.get(RUNS_VARIABLE, "")
    if RUNS_VARIABLE in env and not value.strip():
        raise DdpimgError(
            f"{RUNS_VARIABLE} is set but empty",
            hint=f"unset it for ./{DEFAULT_ROOT}, or give the directory runs go into",
        )
    return Path(value or DEFAULT_ROOT)


def stem_of(text: str) -> str:
    """A trainer's or script's name as the first part of a directory name: letters, digits,
    ``_ . -`` (anything else becomes ``_``), at most MAX_STEM characters, not starting with
    a dot or a dash."""
    stem = _UNSAFE.sub("_", text)[:MAX_STEM].lstrip(".-")
    return stem or "run"


def job_tag(env: Mapping[str, str]) -> str | None:
    """The scheduler's id of this job, as a name part: ``ARRAY_TASK`` ids for an array task,
    else the job id; None outside a Slurm job. DdpimgError for a value that is not digits:
    it would become a path component."""
    if env.get(ARRAY_JOB) or env.get(ARRAY_TASK):
        return f"{_job_id(env, ARRAY_JOB)}_{_job_id(env, ARRAY_TASK)}"
    if JOB in env:
        return _job_id(env, JOB)
    return None


def _job_id(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if value.isascii() and value.isdigit() and len(value) <= MAX_ID_DIGITS:
        return value
    found = "not set" if name not in env else repr(value) if value else "empty"
    raise DdpimgError(
        f"{name} ({found}) is not a Slurm job id ({MAX_ID_DIGITS} digits at most), and the "
        "run's directory is named by it",
        hint="give --out DIR, or unset the SLURM_* variables outside a Slurm job",
    )


def time_tag(now: datetime) -> str:
    """The local start time as a name part: ``20261129-031500``."""
    return now.strftime(TIME_FORMAT)


def run_name(stem: str, tag: str, number: int = 1) -> str:
    """``STEM-TAG``, or ``STEM-TAG.N`` for the Nth run of that stem and tag."""
    return f"{stem}-{tag}" if number == 1 else f"{stem}-{tag}.{number}"


def parse_name(name: str, stem: str) -> RunName | None:
    """``name`` split as a run of ``stem`` (None: not a name ``run_name`` gives ``stem``)."""
    if not name.startswith(f"{stem}-"):
        return None
    rest = name[len(stem) + 1 :]
    tag, dot, suffix = rest.partition(".")
    if not (_TIME_TAG.fullmatch(tag) or _JOB_TAG.fullmatch(tag)):
        return None
    if not dot:
        return RunName(tag, 1)
    match = _SUFFIX.fullmatch(f".{suffix}")
    return RunName(tag, int(match.group(1))) if match else None
