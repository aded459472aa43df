"""Stopping cleanly when the batch system asks: a signal sets a flag, the ranks agree at a
step boundary, a checkpoint is written and every rank exits with ``exitcodes.PREEMPTED``.

Slurm sends SIGTERM when it cancels or preempts a job (SIGKILL follows after
``KillWait``, 30 s by default) and, with ``#SBATCH --signal=USR2@120``, SIGUSR2 that many
seconds before the time limit. The handler only records the signal: writing a checkpoint
is a collective operation, so it happens in the training loop, where every rank is at the
same step. Every ``--preempt-check-every`` steps (and at the last step of each epoch) the
ranks all-reduce their flags (MAX): one scalar, but also a host synchronisation on a GPU,
hence not every step by default. If any rank received a signal, all of them stop there.

SIGUSR1 is refused: NCCL may install its own SIGUSR1 handler (for its debug dumps), and
Slurm jobs often use it for their own purposes.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError

if TYPE_CHECKING:
    import torch

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


class Preempted(Exception):
    """Raised by the training loop once the checkpoint of a preempted run is written."""

    def __init__(self, cause: str, step: int, checkpoint: Path) -> None:
        super().__init__(f"{cause}: stopped after step {step}, checkpoint {checkpoint}")
        self.cause = cause
        self.step = step
        self.checkpoint = checkpoint


class PreemptionWatch:
    """Records the first of ``signals`` (names from ``parse_signals``) this process gets
    while the watch is entered (``received``: e.g. "SIGUSR2"), and tells the loop when all
    ranks agree to stop.

    Enter it before the process group is initialised (rendezvous and data loading can take
    minutes, and a signal then must not kill the process): the handlers stay until exit,
    then the previous ones come back.
    """

    def __init__(self, signals: Iterable[str], check_every: int) -> None:
        self.signals = tuple(signal.Signals[f"SIG{name}"] for name in signals)
        self.check_every = check_every
        self.received: str | None = None
        self._previous: dict[signal.Signals, object] = {}

    def __enter__(self) -> PreemptionWatch:
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._record)
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]  # what signal() returned
        self._previous.clear()

    def _record(self, signum: int, _frame: FrameType | None) -> None:
        # Only a flag: the handler runs between bytecodes of the main thread, where
        # printing or touching torch could interleave with what the loop is doing.
        if self.received is None:
            self.received = signal.Signals(signum).name

    def agreed(self, step: int, device: torch.device, epoch_end: bool = False) -> bool:
        """Whether every rank stops after ``step``: at check steps (every ``check_every``
        and at the last step of an epoch) the ranks' flags are all-reduced (a collective:
        every rank calls this at every step). False at every other step."""
        if not self.signals or (step % self.check_every and not epoch_end):
            return False
        import torch
        import torch.distributed as dist

        flag = torch.tensor(0 if self.received is None else 1, dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        stop = bool(flag.item())
        if stop and self.received is None:
            self.received = "a signal to another rank"
        return stop


def forward_to_children(signals: Iterable[str]) -> None:
    """Pass each of ``signals`` (names from ``parse_signals``) that this process receives on
    to its child processes: ``train --nproc-per-node``'s local workers, which checkpoint and
    exit with status 75 that the launcher then returns."""

    def forward(signum: int, _frame: FrameType | None) -> None:
        for pid in child_pids():
            # A child may exit between the listing and the kill.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    for name in signals:
        signal.signal(signal.Signals[f"SIG{name}"], forward)


def child_pids(parent: int | None = None) -> list[int]:
    """The processes whose parent is ``parent`` (default: this one), from /proc (Linux)."""
    parent = os.getpid() if parent is None else parent
    found: list[int] = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # it exited while we looked
        # The command name (2nd field) is in parentheses and may hold spaces; ppid follows.
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == parent:
            found.append(int(stat.parent.name))
    return sorted(found)
