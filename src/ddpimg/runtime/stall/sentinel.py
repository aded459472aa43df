"""The rank's sentinel: a small child process that SIGKILLs its parent, by PID, once the
parent has not run for ``limit`` seconds.

Why a process of its own: a rank stopped by SIGSTOP (or frozen, or hung with the
interpreter lock held) runs none of its threads, so nothing inside it can end it, and the
other ranks may be on other hosts, where its PID means nothing. Its peers give up on it
after ``--timeout`` and exit; without the sentinel it would stay, holding its GPU and
keeping ``srun`` (which waits for every task) and torchrun's agent (30 s of SIGTERM
first) from returning.

The parent's watch thread writes a byte into a pipe every heartbeat. The sentinel kills
the parent when no byte came for ``limit`` seconds, and exits by itself when the pipe
closes (the parent exited) or it has another parent. It ignores the signals that stop a
job step politely (the parent may be stopped and never act on them: the sentinel must
outlive them), not SIGKILL. Stopped together with its parent (Ctrl-Z of the whole
process group, ``scontrol suspend``), it notices the gap in its own clock afterwards and
starts counting again: a suspended job is not a stalled one.

Run as a script with only the standard library (``python -I -S sentinel.py FD PID LIMIT
LABEL``): it starts in milliseconds and holds about 10 MB.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

IGNORED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
# The sentinel's own wake-ups; a longer gap between two means it was stopped itself.
POLL_S = 0.5
OWN_GAP_S = 5.0


def watch(fd: int, parent: int, limit_s: float, label: str, poll_s: float = POLL_S) -> str:
    """Watch the parent through the pipe ``fd``; returns what happened: ``"exited"`` (the
    pipe closed or the parent changed) or ``"killed"``."""
    last = time.monotonic()
    woke = last
    while True:
        ready, _, _ = select.select([fd], [], [], poll_s)
        now = time.monotonic()
        if now - woke > OWN_GAP_S:
            last = now  # this process was stopped too: the clock starts again
        woke = now
        if ready:
            if not os.read(fd, 4096):
                return "exited"
            last = now
            continue
        if os.getppid() != parent:
            return "exited"
        if now - last > limit_s:
            print(
                f"ddpimg: {label} (pid {parent}) has not run for {now - last:.0f} s (stopped, "
                "or hung holding the interpreter): its sentinel kills it with SIGKILL",
                file=sys.stderr,
                flush=True,
            )
            os.kill(parent, signal.SIGKILL)
            return "killed"


def main(argv: list[str]) -> int:
    for name in IGNORED:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    fd, parent, limit_s, label = int(argv[0]), int(argv[1]), float(argv[2]), argv[3]
    watch(fd, parent, limit_s, label)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
