"""Stopping cleanly when the batch system asks: a signal sets a flag, the ranks agree at a
step boundary, a checkpoint is written and every rank exits with ``exitcodes.PREEMPTED``.

Slurm sends SIGTERM when it cancels or preempts a job (SIGKILL follows after
``KillWait``, 30 s by default) and, with ``#SBATCH --signal=USR2@120``, SIGUSR2 that many
seconds before the time limit (which signals: ``preempt_signals``). The handler only records
the signal: writing a checkpoint is a collective operation, so it happens in the training
loop, where every rank is at the same step. Every ``--preempt-check-every`` steps (and at the
last step of each epoch) the ranks all-reduce their flags (MAX): one scalar, but also a host
synchronisation on a GPU, hence not every step by default. If any rank received a signal,
all of them stop there (the loop then raises ``preempted.Preempted``).
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


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
