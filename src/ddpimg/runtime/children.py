"""This process's children: listing them (from /proc), and passing signals on to them (the
``--nproc-per-node`` launcher's preemption signals and Ctrl-C go to its local workers)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from pathlib import Path
from types import FrameType


def forward_to_children(signals: Iterable[str]) -> None:
    """Pass each of ``signals`` (names without SIG) that this process receives on to its
    child processes: ``train --nproc-per-node``'s local workers, which checkpoint and
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
