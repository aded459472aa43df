"""``--preempt-signals``: the signals that ask a run to stop cleanly, as names.

Slurm sends SIGTERM when it cancels or preempts a job and, with ``#SBATCH
--signal=USR2@120``, SIGUSR2 that many seconds before the time limit: hence the default.
SIGUSR1 is refused: NCCL may install its own SIGUSR1 handler (for its debug dumps), and
Slurm jobs often use it for their own purposes.
"""

from __future__ import annotations

import signal

from ddpimg.errors import DdpimgError

DEFAULT_SIGNALS = ("USR2", "TERM")
DISABLED = "none"
REFUSED = {
    "USR1": "NCCL may handle SIGUSR1 itself; use USR2 (sbatch --signal=USR2@120) or TERM",
    "KILL": "SIGKILL cannot be caught; use USR2 or TERM",
    "STOP": "SIGSTOP cannot be caught; use USR2 or TERM",
}


def parse_signals(text: str) -> tuple[str, ...]:
    """``--preempt-signals``: comma-separated names (``USR2,TERM``, ``SIGUSR2``, any case)
    as canonical names without the SIG prefix; ``none`` gives no signal."""
    if text.strip().lower() == DISABLED:
        return ()
    names: list[str] = []
    for part in text.split(","):
        name = part.strip().upper().removeprefix("SIG")
        if not name:
            raise DdpimgError(
                f"--preempt-signals {text!r} has an empty name",
                hint="give names separated by commas, e.g. USR2,TERM, or 'none'",
            )
        if name in REFUSED:
            raise DdpimgError(
                f"--preempt-signals {text!r}: SIG{name} is refused", hint=REFUSED[name]
            )
        if not isinstance(getattr(signal, f"SIG{name}", None), signal.Signals):
            raise DdpimgError(
                f"--preempt-signals {text!r}: {part.strip()!r} is not a signal name",
                hint="use names such as USR2, TERM, INT, HUP (with or without SIG)",
            )
        if name not in names:
            names.append(name)
    return tuple(names)
