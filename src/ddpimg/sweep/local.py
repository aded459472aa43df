"""A sweep on this machine: each point a ``train`` process of its own, one after another or
``--parallel K`` at once, each writing into its own directory under the sweep's.

- The sweep's directory holds ``sweep.json`` (written once; a directory that holds another
  sweep's is refused) and is locked (``ddpimg.runs.lock``) while this runs: the same sweep
  started in a second terminal is refused rather than run twice into the same directories.
- A point whose run completed is skipped; any other continues, since its ``train`` runs with
  ``--resume auto`` in its own ``--out``: from its newest checkpoint, or from the start.
- One point at a time, its output is this command's; several at once, each point's goes to
  ``POINT/train.log``, and each process gets its share of the CPUs (``OMP_NUM_THREADS``,
  unless set).
- A point that fails does not stop the others; the table and the verdict at the end say how
  each ended. Ctrl-C stops the points running (each records it) and starts no other; USR2 or
  TERM (a batch job's warning) are passed on to the points running, which checkpoint and
  stop, and the sweep exits 75 so that its job is requeued and the same command continues.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any, TextIO

from ddpimg import exitcodes
from ddpimg.errors import printable
from ddpimg.fsio import write_json_atomic
from ddpimg.runs import lock
from ddpimg.runs.records import COMPLETED, read_run
from ddpimg.sweep.results import read_results, read_sweep_file, verdict
from ddpimg.sweep.spec import SWEEP_FILE, Point, SweepError
from ddpimg.sweep.table import points_table

LOG_NAME = "train.log"
POLL_S = 0.2
# After Ctrl-C or a preemption signal: how long the points running get to write their
# checkpoint and manifest before they are killed.
STOP_WAIT_S = 120.0
FORWARDED = (signal.SIGUSR2, signal.SIGTERM)


@dataclass(frozen=True)
class LocalSweep:
    """What to run: the sweep's ``name``, its ``directory``, ``sweep.json``'s content
    (``document``), the ``points``, and ``argv(point, out)``, a point's whole command."""

    name: str
    directory: Path
    document: Mapping[str, Any]
    points: tuple[Point, ...]
    argv: Callable[[Point, str], list[str]]
    same: Callable[[Mapping[str, Any]], bool]


def say(words: str, stream: TextIO) -> None:
    print(f"ddpimg: {words}", file=stream, flush=True)


def make_directory(sweep: LocalSweep) -> None:
    try:
        sweep.directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SweepError(
            f"cannot create the sweep's directory {sweep.directory} ({err.strerror})",
            hint="run from a directory you can write, set DDPIMG_RUNS to one, or give --out DIR",
        ) from err


def check_directory(sweep: LocalSweep, held: bool) -> None:
    """The sweep's directory is this process's (``held``: its lock); write ``sweep.json``,
    or check that the one there is this sweep's."""
    directory = sweep.directory
    if not held:
        raise SweepError(
            f"sweep {sweep.name} is being run by another process ({directory}/{lock.LOCK_NAME} "
            "is held)",
            hint="wait for it to end (ddpimg runs shows its points), or stop it; the same "
            "command then continues what is left",
        )
    if os.path.lexists(directory / SWEEP_FILE):
        found = read_sweep_file(directory)
        if not sweep.same(found.document):
            raise SweepError(
                f"{directory} holds another sweep ({found.name}: "
                f"{' '.join(found.command)} over {', '.join(found.axis_names)})",
                hint="give another --out, or leave --out out: each sweep gets a directory "
                "named by its definition",
            )
        return
    write_json_atomic(directory / SWEEP_FILE, dict(sweep.document))


class _Runner:
    def __init__(
        self, sweep: LocalSweep, parallel: int, env: Mapping[str, str], stream: TextIO
    ) -> None:
        self.sweep = sweep
        self.parallel = parallel
        self.env = dict(env)
        self.stream = stream
        self.running: dict[Point, tuple[subprocess.Popen[bytes], IO[bytes] | None]] = {}
        self.statuses: dict[Point, int] = {}
        self.stop_signal: int | None = None

    def run(self, pending: Sequence[Point]) -> None:
        queue = list(pending)
        total = len(self.sweep.points)
        while queue or self.running:
            while queue and len(self.running) < self.parallel and self.stop_signal is None:
                point = queue.pop(0)
                out = self.sweep.directory / point.name
                say(
                    f"sweep {self.sweep.name}: point {point.index + 1}/{total}, "
                    f"{printable(point.words())} -> {out}",
                    self.stream,
                )
                self._start(point, out)
            if self.stop_signal is not None:
                queue.clear()
            self._reap()
            if self.running:
                time.sleep(POLL_S)

    def _start(self, point: Point, out: Path) -> None:
        log: IO[bytes] | None = None
        if self.parallel > 1:
            out.mkdir(parents=True, exist_ok=True)
            log = open(out / LOG_NAME, "ab")  # noqa: SIM115  (closed when the point ends)
        argv = self.sweep.argv(point, str(out))
        try:
            proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=log)
        except OSError:
            if log is not None:
                log.close()
            raise
        self.running[point] = (proc, log)

    def _reap(self) -> None:
        for point, (proc, log) in list(self.running.items()):
            status = proc.poll()
            if status is None:
                continue
            del self.running[point]
            if log is not None:
                log.close()
            self.statuses[point] = status
            record = read_run(self.sweep.directory / point.name)
            ended = record.status if record.manifest is not None else f"exit status {status}"
            where = f"; its output: {self.sweep.directory / point.name / LOG_NAME}"
            note = where if log is not None and status != 0 else ""
            say(f"sweep {self.sweep.name}: {printable(point.name)} {ended}{note}", self.stream)

    def forward(self, signum: int, _frame: FrameType | None = None) -> None:
        """A preemption signal: every point running checkpoints and stops; no other starts."""
        self.stop_signal = signum
        for proc, _ in self.running.values():
            if proc.poll() is None:
                proc.send_signal(signum)

    def stop(self, signum: int) -> None:
        """Pass ``signum`` to the points running and wait for them, within STOP_WAIT_S."""
        self.forward(signum)
        deadline = time.monotonic() + STOP_WAIT_S
        for point, (proc, log) in list(self.running.items()):
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if log is not None:
                log.close()
            self.statuses[point] = proc.returncode
        self.running.clear()


def run_local(
    sweep: LocalSweep,
    *,
    parallel: int,
    env: Mapping[str, str],
    cpus: int,
    stream: TextIO = sys.stderr,
    out: TextIO = sys.stdout,
) -> int:
    """Run the points ``sweep`` has not completed; print the table and the verdict on
    ``out``. Exit status: 0 when every point completed, 75 when a preemption signal stopped
    them, 130 after Ctrl-C, 1 otherwise."""
    make_directory(sweep)
    with lock.holding(sweep.directory) as held:
        check_directory(sweep, held)
        return _run(sweep, parallel=parallel, env=env, cpus=cpus, stream=stream, out=out)


def _run(
    sweep: LocalSweep,
    *,
    parallel: int,
    env: Mapping[str, str],
    cpus: int,
    stream: TextIO,
    out: TextIO,
) -> int:
    env = dict(env)
    if parallel > 1 and not env.get("OMP_NUM_THREADS"):
        env["OMP_NUM_THREADS"] = str(max(cpus // parallel, 1))
    if parallel > cpus:
        say(
            f"warning: --parallel {parallel} on {cpus} CPUs: the points share them and each "
            "runs slower",
            stream,
        )
    pending: list[Point] = []
    for point in sweep.points:
        path = sweep.directory / point.name
        if path.is_dir() and read_run(path).status == COMPLETED:
            say(
                f"sweep {sweep.name}: {printable(point.name)} completed earlier: skipped",
                stream,
            )
        else:
            pending.append(point)
    threads = f", OMP_NUM_THREADS={env['OMP_NUM_THREADS']} each" if parallel > 1 else ""
    say(
        f"sweep {sweep.name}: {len(pending)} of {len(sweep.points)} points to run, "
        f"{min(parallel, max(len(pending), 1))} at a time{threads}; the table: ddpimg runs "
        f"{sweep.directory}",
        stream,
    )
    runner = _Runner(sweep, parallel, env, stream)
    interrupted = False
    with ExitStack() as stack:
        for signum in FORWARDED:
            previous = signal.signal(signum, runner.forward)
            stack.callback(signal.signal, signum, previous)
        try:
            runner.run(pending)
        except KeyboardInterrupt:
            interrupted = True
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            say(f"sweep {sweep.name}: interrupted; waiting for the points running", stream)
            runner.stop(signal.SIGINT)
        except BaseException:
            runner.stop(signal.SIGTERM)
            raise
    results = read_results(sweep.directory)
    print(points_table(results), file=out)
    print(f"sweep {sweep.name}: {verdict(results)}", file=out, flush=True)
    stopped_by = runner.stop_signal
    if interrupted or stopped_by is not None:
        what = "interrupted"
        if not interrupted and stopped_by is not None:
            what = f"stopped by {signal.Signals(stopped_by).name}"
        say(
            f"sweep {sweep.name} {what}: the same command continues the points that did not "
            "complete",
            stream,
        )
        return exitcodes.INTERRUPTED if interrupted else exitcodes.PREEMPTED
    return exitcodes.OK if results.ok else exitcodes.TRAINING_FAILED
