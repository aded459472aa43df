"""Rank 0's choice of the run directory for a run without ``--out`` (the rules: the package
docstring). The caller says what makes an earlier run "the same configuration" (``same``, a
test of its manifest: the trainer's trajectory options, or the script and its arguments)
and tells the other ranks what was chosen.

A new directory is claimed by creating it (``mkdir`` fails if it exists: two runs that
start in the same second get ``NAME`` and ``NAME.2``, never one directory), and an earlier
one by its lock (``lock``); either way ``runs/latest`` then points at it, and one line says
which it is, so the first line of a continued run says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from ddpimg.errors import DdpimgError
from ddpimg.runs import lock
from ddpimg.runs.latest import point_latest
from ddpimg.runs.names import LATEST, job_tag, parse_name, run_name, time_tag
from ddpimg.runs.records import RunRecord, list_runs

AUTO = "auto"
NONE = "none"
# Runs of one stem and tag (one job, or one second): far beyond any real count, a bound on
# the names tried.
MAX_NUMBER = 1000

Same = Callable[[Mapping[str, Any]], bool]


def choose_run_dir(
    root: Path,
    stem: str,
    same: Same,
    *,
    resume: str,
    env: Mapping[str, str],
    stream: TextIO,
    now: datetime | None = None,
) -> Path:
    """The directory under ``root`` this run writes into, made or taken (locked) and
    pointed at by ``root/latest``. ``resume``: ``--resume`` (``auto``, ``none`` or a
    checkpoint: a new directory, except that a job continues its own). DdpimgError when
    ``root`` cannot be written or the job id is not one."""
    tag = job_tag(env)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DdpimgError(
            f"cannot create the runs directory {root} ({err.strerror})",
            hint="run from a directory you can write, set DDPIMG_RUNS to one, or give --out DIR",
        ) from err
    earlier = None
    if resume == AUTO or (resume != NONE and tag is not None):
        earlier = _earlier(root, stem, tag, same)
    if earlier is None:
        chosen = _claim(root, stem, tag or time_tag(now or datetime.now()))
        said = f"ddpimg: new run directory {chosen}"
    else:
        chosen = earlier.path
        which = f"job {tag}'s run" if tag else "the newest run"
        steps = "" if earlier.steps is None else f" at step {earlier.steps}"
        said = (
            f"ddpimg: continuing {chosen}, {which} of these options ({earlier.status}{steps}); "
            "--resume none starts a new one"
        )
    if point_latest(root, chosen, stream) and earlier is None:
        said += f" ({root / LATEST} points to it)"
    print(said, file=stream, flush=True)
    return chosen


def _earlier(root: Path, stem: str, tag: str | None, same: Same) -> RunRecord | None:
    """The earlier run to continue, now locked by this process; None for a new one. A job
    continues the first of its own runs of the same configuration that did not complete;
    outside a scheduler, the newest run started outside one continues if it is of the same
    configuration and did not complete. A run held by a live process is left to it."""
    named = [(parse_name(record.name, stem), record) for record in list_runs(root)]
    runs = sorted(((n, r) for n, r in named if n is not None), key=lambda pair: pair[0])
    if tag is not None:
        mine = [record for name, record in runs if name.tag == tag]
        for record in mine:
            if _continuable(record, same) and lock.hold(record.path):
                return record
        return None
    local = [record for name, record in runs if not name.from_scheduler]
    newest = next((r for r in reversed(local) if r.manifest is not None and same(r.manifest)), None)
    if newest is not None and not newest.completed and lock.hold(newest.path):
        return newest
    return None


def _continuable(record: RunRecord, same: Same) -> bool:
    return record.manifest is not None and not record.completed and same(record.manifest)


def _claim(root: Path, stem: str, tag: str) -> Path:
    """A new directory ``STEM-TAG`` (``.N`` when taken), created by this process and locked."""
    for number in range(1, MAX_NUMBER + 1):
        path = root / run_name(stem, tag, number)
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as err:
            raise DdpimgError(
                f"cannot create the run directory {path} ({err.strerror})",
                hint="run from a directory you can write, set DDPIMG_RUNS to one, or give "
                "--out DIR",
            ) from err
        lock.hold(path)
        return path
    raise DdpimgError(
        f"{root} already holds {MAX_NUMBER} runs named {run_name(stem, tag)}[.N]",
        hint="move old runs away, or give --out DIR",
    )
