"""What a test killed by its hang guard says.

Deadlines in the tests only catch hangs: each is at least 5x the time its command takes on a
2-core CI machine (figures beside each limit). A command that runs past one raises
``subprocess.TimeoutExpired``; tests/conftest.py turns that into this failure message, so a
guard that fires reads as what it is, never as a speed verdict.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import subprocess
from collections.abc import Iterator
from types import FrameType


def hang_guard_message(expired: subprocess.TimeoutExpired) -> str:
    command = expired.cmd if isinstance(expired.cmd, str) else shlex.join(map(str, expired.cmd))
    return (
        f"killed by its hang guard: `{command[:400]}` was still running after "
        f"{expired.timeout:.3g} s. The limit is a guard against hangs (at least 5x the time this "
        "command takes on a 2-core CI machine), not a speed goal: either it hung, or this "
        "machine is more than 5x slower than that."
    )


class HangGuardError(AssertionError):
    pass


@contextlib.contextmanager
def hang_guard(what: str, seconds: float) -> Iterator[None]:
    """The in-process guard: SIGALRM ends the block after ``seconds`` with a failure saying
    it hung (main thread only). ``seconds`` is at least 5x what the block takes."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise HangGuardError(
            f"hang guard: {what} did not end within {seconds:g} s; the limit is a guard "
            "against hangs, not a speed goal"
        )

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
