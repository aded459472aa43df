"""Running a program on the other end: a local process (``ssh HOST ...``, or ``sh -c`` in the
tests) whose output is read back bounded in size and time.

The other end is not trusted: an answer larger than asked for, or one that does not come
within its time, ends the process and becomes an error, never an unbounded read or a wait
without end. ``ConnectionLost`` is a failure of the connection itself (a retry may cure it);
``RemoteError`` is a program on the other end that failed.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Protocol, TypeVar

from ddpimg.errors import DdpimgError

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 60.0
# Answers are small (a job's state, a piece of metrics.jsonl, a manifest); anything larger
# is streamed (``read_stream``).
DEFAULT_LIMIT = 8 << 20
# What of a program's stderr is kept for a message.
STDERR_LIMIT = 64 << 10
_CHUNK = 64 << 10


class RemoteError(DdpimgError):
    """A program on the other end failed, or answered out of bounds."""


class ConnectionLost(DdpimgError):
    """The connection failed or dropped. ``retryable``: it may come back (a network that
    dropped, a login node rebooting), unlike an unknown host or a refused key."""

    def __init__(self, message: str, hint: str | None = None, *, retryable: bool) -> None:
        super().__init__(message, hint)
        self.retryable = retryable


@dataclass(frozen=True)
class Completed:
    """A finished program: its exit status and what it wrote (stdout bounded by the
    caller's limit, stderr by STDERR_LIMIT)."""

    status: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def error_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


class Transport(Protocol):
    """How a command reaches the other end (``ssh.SshTransport``; a local shell in tests)."""

    @property
    def host(self) -> str: ...

    def run(
        self,
        program: str,
        what: str,
        *,
        stdin: bytes = b"",
        timeout: float = DEFAULT_TIMEOUT_S,
        limit: int = DEFAULT_LIMIT,
    ) -> Completed:
        """Run ``program`` (a shell program, ``programs``); ``what`` names it in errors."""
        ...

    def read_stream(
        self, program: str, what: str, consume: Callable[[IO[bytes]], T], *, timeout: float
    ) -> tuple[T, Completed]:
        """Run ``program`` and hand its stdout to ``consume`` as it comes."""
        ...

    def write_stream(
        self, program: str, what: str, produce: Callable[[IO[bytes]], None], *, timeout: float
    ) -> Completed:
        """Run ``program`` with what ``produce`` writes as its stdin."""
        ...

    def close(self) -> None: ...


class _Drain(threading.Thread):
    """Reads a pipe to its end, keeping at most ``limit`` bytes; past that, ``overflow`` is
    set and ``on_overflow`` is called once (it ends the process)."""

    def __init__(self, pipe: IO[bytes], limit: int, on_overflow: Callable[[], None]) -> None:
        super().__init__(daemon=True)
        self.pipe = pipe
        self.limit = limit
        self.on_overflow = on_overflow
        self.data = bytearray()
        self.overflow = False

    def run(self) -> None:
        try:
            while chunk := os.read(self.pipe.fileno(), _CHUNK):
                if self.overflow:
                    continue
                room = self.limit - len(self.data)
                self.data += chunk[: max(room, 0)]
                if len(chunk) > room:
                    self.overflow = True
                    self.on_overflow()
        except (OSError, ValueError):
            return


class _Deadline(threading.Thread):
    """Kills ``proc`` once ``timeout`` has passed, unless cancelled first; ``fired`` says
    whether it did."""

    def __init__(self, timeout: float, proc: subprocess.Popen[bytes]) -> None:
        super().__init__(daemon=True)
        self.timeout = timeout
        self.proc = proc
        self.fired = False
        self._cancelled = threading.Event()

    def run(self) -> None:
        if not self._cancelled.wait(self.timeout) and self.proc.poll() is None:
            self.fired = True
            self.proc.kill()

    def cancel(self) -> None:
        self._cancelled.set()


class ProcessTransport:
    """A transport that starts one local process a program: ``argv`` says which.
    ``failed`` turns a finished process into the error it means (``ssh``: status 255 is the
    connection's), or None."""

    def __init__(self, host: str) -> None:
        self._host = host

    @property
    def host(self) -> str:
        return self._host

    def argv(self, program: str) -> list[str]:
        raise NotImplementedError

    def failed(self, completed: Completed, what: str) -> DdpimgError | None:
        return None

    def close(self) -> None:
        return None

    def _start(self, program: str, stdin: int | None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.argv(program),
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C reaches this process alone; it ends the child
        )

    def run(
        self,
        program: str,
        what: str,
        *,
        stdin: bytes = b"",
        timeout: float = DEFAULT_TIMEOUT_S,
        limit: int = DEFAULT_LIMIT,
    ) -> Completed:
        def feed(pipe: IO[bytes]) -> None:
            pipe.write(stdin)

        return self._exchange(program, what, feed, timeout, limit)

    def write_stream(
        self, program: str, what: str, produce: Callable[[IO[bytes]], None], *, timeout: float
    ) -> Completed:
        return self._exchange(program, what, produce, timeout, DEFAULT_LIMIT)

    def _exchange(
        self,
        program: str,
        what: str,
        produce: Callable[[IO[bytes]], None],
        timeout: float,
        limit: int,
    ) -> Completed:
        proc = self._start(program, subprocess.PIPE)
        out, err = self._drains(proc, limit)
        timer = self._deadline(proc, timeout)
        try:
            pipe = _pipe(proc.stdin)
            try:
                produce(pipe)
                pipe.close()
            except BrokenPipeError:
                pass  # the program ended early: its status and stderr say why
            status = proc.wait()
        except BaseException:
            _end(proc)
            raise
        finally:
            timer.cancel()
        out.join()
        err.join()
        _close(proc)
        completed = Completed(status, bytes(out.data), bytes(err.data))
        return self._finish(what, completed, timer=timer, overflow=out.overflow, limit=limit)

    def read_stream(
        self, program: str, what: str, consume: Callable[[IO[bytes]], T], *, timeout: float
    ) -> tuple[T, Completed]:
        proc = self._start(program, subprocess.DEVNULL)
        err = _Drain(_pipe(proc.stderr), STDERR_LIMIT, lambda: None)
        err.start()
        timer = self._deadline(proc, timeout)
        try:
            value = consume(_pipe(proc.stdout))
            status = proc.wait()
        except BaseException:
            _end(proc)
            raise
        finally:
            timer.cancel()
        err.join()
        _close(proc)
        completed = Completed(status, b"", bytes(err.data))
        return value, self._finish(what, completed, timer=timer, overflow=False, limit=0)

    def _drains(self, proc: subprocess.Popen[bytes], limit: int) -> tuple[_Drain, _Drain]:
        out = _Drain(_pipe(proc.stdout), limit, proc.kill)
        err = _Drain(_pipe(proc.stderr), STDERR_LIMIT, lambda: None)
        out.start()
        err.start()
        return out, err

    @staticmethod
    def _deadline(proc: subprocess.Popen[bytes], timeout: float) -> _Deadline:
        timer = _Deadline(timeout, proc)
        timer.start()
        return timer

    def _finish(
        self, what: str, completed: Completed, *, timer: _Deadline, overflow: bool, limit: int
    ) -> Completed:
        if overflow:
            raise RemoteError(
                f"{self.host}: the answer to {what} is larger than {limit} bytes",
                hint="the login node sent more than ddpimg asks for; nothing of it was kept",
            )
        if timer.fired:
            raise ConnectionLost(
                f"{self.host}: no answer to {what} within {timer.timeout:g} s",
                hint="the connection or the login node may be slow or gone; try again",
                retryable=True,
            )
        error = self.failed(completed, what)
        if error is not None:
            raise error
        return completed


def _pipe(pipe: IO[bytes] | None) -> IO[bytes]:
    if pipe is None:
        raise RuntimeError("a pipe the process was started with is missing")
    return pipe


def _end(proc: subprocess.Popen[bytes]) -> None:
    """End ``proc`` (started by this module) and reap it. Its pipes stay open: a thread may
    still be reading one, and a closed descriptor's number could be another file's."""
    if proc.poll() is None:
        proc.kill()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        return


def _close(proc: subprocess.Popen[bytes]) -> None:
    """Close the pipes of a finished ``proc`` whose readers are done."""
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                continue


def stderr_lines(completed: Completed, count: int = 5) -> Sequence[str]:
    """The last ``count`` non-empty lines of a program's stderr, as text."""
    return [line for line in completed.error_text.splitlines() if line.strip()][-count:]
