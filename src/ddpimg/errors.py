"""User-facing errors.

Every error a user can cause names what was wrong (variable, file, key), the value found and a
hint. The CLI prints ``ddpimg: error: <message>`` on stderr and exits with status 2.
"""

from __future__ import annotations


class DdpimgError(ValueError):
    """An error the user can act on. ``str(err)`` is the whole message, hint included."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(f"{message}\n  hint: {hint}" if hint else message)


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
