"""``ddpimg fetch``: a run's files brought back into a local run directory.

What comes: the run's ``manifest.json`` and ``metrics.jsonl``, the trackers' offline runs
(``tensorboard/``, ``wandb/``, ``mlruns/``, ``trackers.json``), the plots in its directory,
the job's log and script, and with ``--checkpoints newest`` the newest checkpoint. The login
node packs them (``programs.pack``); what it sends is written only under the names asked for,
into the run's local directory (``untar``): anything else it sends is skipped and said.

A sweep (``fetch_sweep``) comes as its ``sweep.json`` and job script, then each point as a
run of its own into a directory of the same name under the sweep's, with its array task's
log; a point that has not started has nothing to bring.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from ddpimg.errors import DdpimgError, printable
from ddpimg.remote import programs
from ddpimg.remote.slurm_pattern import name_rule
from ddpimg.remote.state import RemoteRun
from ddpimg.remote.transport import Transport, stderr_lines
from ddpimg.remote.untar import Unpacked, unpack
from ddpimg.run_files import MANIFEST, METRICS
from ddpimg.sweep.spec import SWEEP_FILE

RUN_FILES = (MANIFEST, METRICS, "trackers.json")
TRACKER_FOLDERS = ("tensorboard", "wandb", "mlruns")
PLOT_SUFFIXES = ("png", "svg", "pdf")
CHECKPOINTS = "checkpoints"
DEFAULT_MAX_GB = 20
FETCH_TIMEOUT_S = 6 * 3600.0
TAR_CHANGED = 1  # GNU tar: a file changed as it was read (a run still writing); the rest came
_STEP = re.compile(r"step-\d{8,}")


class NothingToFetch(DdpimgError):
    """The login node has none of a run's files (the job has not started)."""


@dataclass(frozen=True)
class Fetched:
    """What came: where, the files, the checkpoint's name; ``changing``: some files changed
    while they were packed (the run goes on)."""

    local_dir: Path
    unpacked: Unpacked
    checkpoint: str | None
    changing: bool = False


def accepted(
    run: RemoteRun, checkpoints: bool, also: Sequence[str] = ()
) -> tuple[Callable[[str], bool], list[str]]:
    """Which names of the stream are written, and the newest checkpoint's name once seen
    (the list): the run's files (and ``also``), its plots, the trackers' folders, the log
    (a name its Slurm filename pattern gives) and the job script, and one
    ``checkpoints/step-N`` folder with ``checkpoints``."""
    singles = {*RUN_FILES, *also, programs.JOB_SCRIPT}
    log = name_rule(run.log.rsplit("/", 1)[-1])
    seen_checkpoint: list[str] = []

    def accept(name: str) -> bool:
        first, _, rest = name.partition("/")
        if not rest:
            plot = "." in name and name.rsplit(".", 1)[1] in PLOT_SUFFIXES
            return name in singles or plot or log.fullmatch(name) is not None
        if first in TRACKER_FOLDERS:
            return True
        if checkpoints and first == CHECKPOINTS:
            step, _, inside = rest.partition("/")
            if not inside or not _STEP.fullmatch(step):
                return False
            if not seen_checkpoint:
                seen_checkpoint.append(step)
            return step == seen_checkpoint[0]
        return False

    return accept, seen_checkpoint


class _Prefixed:
    """``stream`` with ``first`` (already read from it) in front."""

    def __init__(self, first: bytes, stream: IO[bytes]) -> None:
        self.first = first
        self.stream = stream

    def read(self, size: int = -1) -> bytes:
        if not self.first:
            return self.stream.read(size)
        if size < 0:
            data, self.first = self.first + self.stream.read(), b""
            return data
        data, self.first = self.first[:size], self.first[size:]
        return data if len(data) == size else data + self.stream.read(size - len(data))


def fetch_run(
    transport: Transport,
    run: RemoteRun,
    local_dir: Path,
    *,
    checkpoints: bool,
    max_bytes: int,
    also: Sequence[str] = (),
) -> Fetched:
    """Bring ``run``'s files (and the files ``also`` names in its directory) into
    ``local_dir``: the log is the newest file its ``--output`` pattern names (``%u``,
    ``%N``: whatever Slurm made of them)."""
    extra = [f"{run.job_dir}/{programs.JOB_SCRIPT}"] if run.job_dir else []
    program = programs.pack(
        run.run_dir or "/nonexistent",
        [*RUN_FILES, *also, *TRACKER_FOLDERS],
        PLOT_SUFFIXES,
        checkpoints,
        extra,
        log=run.log,
    )
    accept, checkpoint = accepted(run, checkpoints, also)

    def consume(stream: IO[bytes]) -> Unpacked:
        first = stream.read(tarfile.BLOCKSIZE)
        if not first:  # nothing there to pack: the status says so
            return Unpacked()
        return unpack(_Prefixed(first, stream), local_dir, accept, max_bytes)

    unpacked, done = transport.read_stream(
        program, "the run's files", consume, timeout=FETCH_TIMEOUT_S
    )
    if done.status == programs.MISSING:
        raise NothingToFetch(
            f"{run.host}: nothing of run {run.name} to fetch: no {printable(run.run_dir)} and no "
            f"log {printable(run.log)} on the login node",
            hint=f"the job may not have started yet: ddpimg follow {run.name}",
        )
    if done.status not in (0, TAR_CHANGED):
        said = "; ".join(printable(line) for line in stderr_lines(done)) or f"status {done.status}"
        raise DdpimgError(
            f"{run.host}: packing run {run.name}'s files failed: {said}",
            hint="what was written before is kept; fetch again",
        )
    return Fetched(
        local_dir, unpacked, checkpoint[0] if checkpoint else None, done.status == TAR_CHANGED
    )


def point_run(run: RemoteRun, index: int, name: str) -> RemoteRun:
    """A sweep's point as a run of its own: its directory under the sweep's, its array
    task's log (the sweep's log pattern with the task's id for ``%a``), no job script."""
    return replace(
        run,
        name=f"{run.name}/{name}",
        run_dir=f"{run.run_dir}/{name}",
        log=run.log.replace("%a", str(index)),
        job_dir="",
        local_dir=str(Path(run.local_dir) / name),
        points=(),
    )


@dataclass(frozen=True)
class SweepFetched:
    """What came of a sweep: its own files, each point's (by name), the points that had
    nothing yet."""

    sweep: Fetched
    points: dict[str, Fetched]
    missing: list[str]

    @property
    def files(self) -> int:
        return len(self.sweep.unpacked.written) + sum(
            len(item.unpacked.written) for item in self.points.values()
        )

    @property
    def size(self) -> int:
        return self.sweep.unpacked.size + sum(item.unpacked.size for item in self.points.values())

    @property
    def skipped(self) -> list[str]:
        names = list(self.sweep.unpacked.skipped)
        for point, item in self.points.items():
            names += [f"{point}/{name}" for name in item.unpacked.skipped]
        return names


def fetch_sweep(
    transport: Transport, run: RemoteRun, local_dir: Path, *, checkpoints: bool, max_bytes: int
) -> SweepFetched:
    """Bring the sweep ``run``'s ``sweep.json``, job script and every point into
    ``local_dir``, within ``max_bytes`` in all."""
    own = replace(run, log="", points=())
    sweep = fetch_run(
        transport, own, local_dir, checkpoints=False, max_bytes=max_bytes, also=[SWEEP_FILE]
    )
    left = max_bytes - sweep.unpacked.size
    points: dict[str, Fetched] = {}
    missing: list[str] = []
    for index, name in enumerate(run.points):
        try:
            fetched = fetch_run(
                transport,
                point_run(run, index, name),
                local_dir / name,
                checkpoints=checkpoints,
                max_bytes=left,
            )
        except NothingToFetch:
            missing.append(name)
            continue
        points[name] = fetched
        left -= fetched.unpacked.size
    return SweepFetched(sweep, points, missing)
