"""User-facing errors, and the one way they are printed.

Every error a user can cause names what was wrong (variable, file, key), the value found and a
hint. The CLI prints it with ``report`` (``ddpimg: error: <message>`` and ``  hint: ...`` on
stderr) and exits with ``exitcodes.for_error(err)``.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

PREFIX = "ddpimg: error: "


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on written as an escape (``\\n``,
    ``\\x1b``, ``\\u202e``): a file or member name from someone else's data reaches the
    terminal as text, never as a cursor move, a colour, a second line or reversed writing.
    Surrogates (bytes of a name that are not UTF-8) become ``\\xNN`` too."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def _escape(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's stand-in for an undecodable byte
        return f"\\x{code - 0xDC00:02x}"
    return repr(char)[1:-1]


def printable_lines(text: str) -> str:
    """``printable``, except a line break followed by an indentation of two spaces: the
    continuation lines ddpimg's own messages use (a list of problems, a hint). A break
    anywhere else is escaped, so no text quoted in a message can start a line of its own
    (a fake ``ddpimg: error:``)."""
    return "\n".join(printable(part) for part in _CONTINUATION.split(text))


_CONTINUATION = re.compile(r"\n(?=  )")


def with_hint(message: str, hint: str | None) -> str:
    """``message`` followed by an indented ``hint:`` line, as every user error reads."""
    return f"{message}\n  hint: {hint}" if hint else message


def report(message: object, hint: str | None = None, stream: TextIO | None = None) -> None:
    """Print ``ddpimg: error: <message>`` (and the hint) and flush: the caller may exit at
    once, even by ``os._exit``, which flushes nothing. A DdpimgError is printed once: one
    that every rank learns from rank 0 is printed as soon as it is known (a launcher may end
    a rank once another has exited), and the handler it then reaches prints nothing more.
    Message and hint are made printable (``printable_lines``): they may quote names from
    files someone else made."""
    if isinstance(message, DdpimgError):
        if message.reported:
            return
        message.reported = True
    target = sys.stderr if stream is None else stream
    if isinstance(message, DdpimgError) and hint is None:
        hint = message.hint
        message = message.message
    text = with_hint(printable_lines(str(message)), None if hint is None else printable(hint))
    print(PREFIX + text, file=target, flush=True)


def warn(message: str, stream: TextIO | None = None) -> None:
    """Print ``ddpimg: warning: <message>``, ``printable``, and flush."""
    target = sys.stderr if stream is None else stream
    print(f"ddpimg: warning: {printable(message)}", file=target, flush=True)


# Not a ValueError: a broad ``except ValueError`` around library code (a checkpoint load, a
# parse) must not catch a user error and re-word it.
class DdpimgError(Exception):
    """An error the user can act on. ``str(err)`` is the whole message, hint included."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        self.reported = False  # by ``report``
        super().__init__(with_hint(message, hint))


class LauncherError(DdpimgError):
    """Launcher variables are missing, malformed or contradict each other."""


class HostlistError(LauncherError):
    """A Slurm hostlist or tasks-per-node string cannot be parsed."""


class ProfileError(DdpimgError):
    """A site profile is malformed, unknown or does not fit the machine."""


class DataError(DdpimgError):
    """Training data is missing or corrupt."""


class RendezvousError(DdpimgError):
    """Ranks could not meet: missing ranks, unreachable master, timeouts."""


class StartStopped(DdpimgError):
    """A preemption signal (SIGTERM, SIGUSR2) arrived while the ranks were starting: they
    stop there, with nothing to checkpoint, and the job can be requeued. No error: rank 0
    says so in one line (``announce``), the others exit with the same status silently, as
    after a preemption in training."""

    def __init__(self, message: str, hint: str | None = None, *, rank: int = 0) -> None:
        super().__init__(message, hint)
        self.rank = rank

    def announce(self, status: int, stream: TextIO | None = None) -> None:
        """Rank 0's one line: the message and the exit status."""
        if self.rank != 0 or self.reported:
            return
        self.reported = True
        target = sys.stderr if stream is None else stream
        print(f"ddpimg: {printable(self.message)}; exit status {status}", file=target, flush=True)


class RankLostError(DdpimgError):
    """During training a rank stopped reporting, failed or fell behind, and the others gave
    up on it. ``details`` is the JSON-ready verdict that manifest.json records. ``raised``:
    every rank named failed by an error of its own (it published it and exited): then the
    run failed (exit status 1, like that rank's), no rank was lost, and a requeue would only
    meet the same error again."""

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        details: dict[str, object] | None = None,
        *,
        raised: bool = False,
    ) -> None:
        super().__init__(message, hint)
        self.details = details or {}
        self.raised = raised


class JobError(DdpimgError):
    """A job cannot be rendered or submitted as asked."""
