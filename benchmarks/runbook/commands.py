"""Commands the steps run: each bounded by the part's deadline (the whole process group is
killed when it is spent, launchers' workers included), its output kept in the part's log."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runbook.deadline import Deadline

PYTHON = sys.executable
# What one command may leave in the log: its tail (a failing trainer's traceback is at the
# end; a passing one needs no more than its last lines).
LOG_TAIL_CHARS = 6000


@dataclass(frozen=True)
class Ran:
    """A finished (or killed) command."""

    argv: tuple[str, ...]
    returncode: int | None  # None: killed (by ``killed_by``)
    stdout: str
    stderr: str
    seconds: float
    killed_by: str = "the part's budget"

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def tail(self, chars: int = 1500) -> str:
        return self.output[-chars:].strip()

    def verdict(self) -> str:
        """``exit 0``, ``exit 1``, or ``killed by WHAT after N s``."""
        if self.timed_out:
            return f"killed by {self.killed_by} after {self.seconds:.0f} s"
        return f"exit {self.returncode}"


class RunLog:
    """The part's log file: every command, its exit and the tail of its output. Several
    matrix cells write at once, hence the lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.write_text("")

    def write(self, text: str) -> None:
        with self._lock, self.path.open("a") as log:
            log.write(text.rstrip("\n") + "\n")

    def record(self, ran: Ran, cwd: Path | None) -> None:
        where = f" (in {cwd})" if cwd else ""
        self.write(
            f"$ {' '.join(ran.argv)}{where}\n"
            f"# {ran.verdict()}, {ran.seconds:.1f} s\n{ran.output[-LOG_TAIL_CHARS:]}\n"
        )


def descendants(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """The processes below ``pid`` (children, theirs, ...), read from ``/proc``."""
    children: dict[int, list[int]] = {}
    for stat in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The command name (2nd field) may hold spaces and parentheses: split after it.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it. torch elastic starts each worker in a
    session of its own, so killing the launcher's process group would leave them running."""
    for target in [pid, *descendants(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)


def progress(message: str) -> None:
    """A progress line on stderr: what the device's reply shows before the summary."""
    print(f"runbook: {message}", file=sys.stderr, flush=True)


def run(
    argv: Sequence[str],
    deadline: Deadline,
    log: RunLog,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    limit_s: float | None = None,
) -> Ran:
    """Run ``argv`` in a process group of its own, for at most ``limit_s`` seconds (or the
    deadline's hang guard) and never past the deadline; on either, the whole group is killed
    (torch elastic's workers too)."""
    timeout, killer = deadline.command_limit(limit_s)
    began = time.perf_counter()
    with subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=None if env is None else dict(env),
        cwd=cwd,
        start_new_session=True,
    ) as process:
        returncode: int | None
        try:
            stdout, stderr = process.communicate(timeout=timeout)
            returncode = process.returncode
        except subprocess.TimeoutExpired:
            kill_tree(process.pid)
            stdout, stderr = process.communicate()
            returncode = None
    ran = Ran(tuple(argv), returncode, stdout, stderr, time.perf_counter() - began, killer)
    log.record(ran, cwd)
    return ran
