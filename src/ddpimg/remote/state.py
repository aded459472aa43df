"""The laptop's record of the runs it submitted: ``$XDG_STATE_HOME/ddpimg/remote-runs.json``
(``~/.local/state`` when unset), one entry a run, by name.

A run's name is ``STEM-JOBID`` (``mnist-4242``), as its directory on the cluster would be named,
with ``.N`` when another host gave the same job id; ``latest`` is the newest submitted. The
file is read as data: a bounded size and count, each entry checked field by field; an entry
that does not fit is an error naming the file (it was edited, or is another version's), never
a guess. It is written whole and replaced atomically, under a lock, so two terminals
submitting at once both keep their runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from ddpimg.errors import DdpimgError, printable
from ddpimg.fsio import write_text_atomic
from ddpimg.runs.names import LATEST
from ddpimg.runs.records import read_regular
from ddpimg.untrusted import parse_json

STATE_VARIABLE = "XDG_STATE_HOME"
FILE_NAME = "remote-runs.json"
VERSION = 1
MAX_BYTES = 16 << 20
MAX_RUNS = 10_000
MAX_TEXT = 4096
MAX_NUMBER = 1000
_POINT = re.compile(r"[A-Za-z0-9._=+-]{1,200}")


@dataclass(frozen=True)
class RemoteRun:
    """One submitted run: where it is (``host``; there the submission's directory
    ``job_dir``, the directory the job runs in ``workdir``, its run directory ``run_dir``
    (empty for a command that makes none) and the job's ``log``), what it was, and what was
    last seen of it (``state``: Slurm's; ``status``: the manifest's; ``steps``, ``loss``).
    A sweep (``ddpimg submit --sweep``) is one array job: ``points`` names its points in
    the order of their array tasks, ``run_dir`` is the sweep's directory, ``log`` the tasks'
    log with ``%a`` for the task's id, ``status`` the counts of its points."""

    name: str
    host: str
    job_id: str
    job_dir: str
    workdir: str
    run_dir: str
    log: str
    submitted_utc: str
    site: str
    command: tuple[str, ...]
    local_dir: str
    state: str = ""
    status: str = ""
    steps: int | None = None
    loss: float | None = None
    points: tuple[str, ...] = ()

    @property
    def is_sweep(self) -> bool:
        return bool(self.points)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["command"] = list(self.command)
        data["points"] = list(self.points)
        return data


def state_path(env: Mapping[str, str]) -> Path:
    base = env.get(STATE_VARIABLE) or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(base) / "ddpimg" / FILE_NAME


def _bad(path: Path, what: str) -> DdpimgError:
    return DdpimgError(
        f"{path}: {what}",
        hint="it is ddpimg's record of the runs submitted from here; move it away to start "
        "a new one (the runs on the clusters are not touched)",
    )


def _entry(path: Path, data: Any) -> RemoteRun:
    if not isinstance(data, dict):
        raise _bad(path, "an entry is not a JSON object")
    values: dict[str, Any] = {}
    for item in fields(RemoteRun):
        value = data.get(item.name)
        if item.name in ("command", "points"):
            if item.name == "points" and value is None:  # recorded before sweeps
                value = []
            check = _point_name if item.name == "points" else _string
            if not isinstance(value, list) or not all(check(w) for w in value):
                entry = printable(str(data.get("name")))
                raise _bad(path, f"entry {entry}: {item.name} is not a list of strings")
            values[item.name] = tuple(value)
        elif item.name == "steps":
            ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
            values["steps"] = value if ok else None
        elif item.name == "loss":
            number = isinstance(value, int | float) and not isinstance(value, bool)
            values["loss"] = float(value) if number and value is not None else None
        elif isinstance(value, str) and len(value) <= MAX_TEXT:
            values[item.name] = value
        elif item.name in ("state", "status") and value is None:
            values[item.name] = ""
        else:
            entry = printable(str(data.get("name")))
            raise _bad(path, f"entry {entry}: {item.name} is not a string")
    if not values["name"] or "/" in values["name"] or values["name"] == LATEST:
        raise _bad(path, f"an entry's name {printable(values['name'])!r} is not a run name")
    return RemoteRun(**values)


def _string(value: Any) -> bool:
    return isinstance(value, str)


def _point_name(value: Any) -> bool:
    """A sweep's point: one plain directory name (ddpimg.sweep.spec names them so)."""
    return (
        isinstance(value, str) and _POINT.fullmatch(value) is not None and value not in (".", "..")
    )


def load(path: Path) -> list[RemoteRun]:
    """The runs recorded in ``path``, oldest first; none when it does not exist."""
    try:
        text = read_regular(path, MAX_BYTES)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise _bad(path, f"cannot be read ({err.strerror})") from err
    try:
        data = parse_json(text)
    except ValueError as err:
        raise _bad(path, str(err)) from err
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise _bad(path, f"not a version {VERSION} record of runs")
    runs = data.get("runs")
    if not isinstance(runs, list) or len(runs) > MAX_RUNS:
        raise _bad(path, f"runs is not a list of at most {MAX_RUNS} entries")
    return [_entry(path, item) for item in runs]


def _save(path: Path, runs: Sequence[RemoteRun]) -> None:
    data = {"version": VERSION, "runs": [run.to_json() for run in runs]}
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(
            path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600
        )
    except OSError as err:
        raise _bad(path, f"cannot be written ({err.strerror})") from err
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def add(path: Path, run: RemoteRun) -> RemoteRun:
    """Record ``run``; its name (and its local directory's) gets ``.N`` when another run
    has it. Returns what was recorded."""
    with _locked(path):
        runs = load(path)
        taken = {item.name for item in runs}
        names = [run.name, *(f"{run.name}.{number}" for number in range(2, MAX_NUMBER + 1))]
        name = next((name for name in names if name not in taken), None)
        if name is None:
            raise _bad(path, f"{MAX_NUMBER} runs are named {run.name}[.N]")
        local_dir = str(Path(run.local_dir).with_name(name)) if run.local_dir else ""
        recorded = replace(run, name=name, local_dir=local_dir)
        _save(path, [*runs, recorded][-MAX_RUNS:])
        return recorded


def update(path: Path, name: str, **values: Any) -> None:
    """Set what was last seen of run ``name`` (gone from the file: nothing to do)."""
    with _locked(path):
        runs = load(path)
        changed = [replace(run, **values) if run.name == name else run for run in runs]
        if changed != runs:
            _save(path, changed)


def find(runs: Sequence[RemoteRun], text: str) -> RemoteRun:
    """The run ``text`` names: a run's name, or ``latest`` (the newest submitted)."""
    if text == LATEST and runs:
        return runs[-1]
    for run in runs:
        if run.name == text:
            return run
    known = ", ".join(run.name for run in runs[-5:]) or "none yet"
    raise DdpimgError(
        f"{printable(text)}: no run of that name was submitted from here (newest: {known})",
        hint="ddpimg runs lists them; give a run's name as ddpimg submit printed it, or latest",
    )
