"""Waits that hear a preemption signal.

Python runs a signal handler only between bytecodes of the main thread: while the main
thread blocks in torch's C++ (a TCPStore client connecting to a master that has not started
yet, ``store.wait`` for rank 0's decision), a SIGTERM or SIGUSR2 is only noted, and acted on
when the call returns, which may be minutes later, past the scheduler's grace period
(Slurm's ``KillWait``, 30 s by default, then SIGKILL). So such a call runs in a helper thread
(torch releases the interpreter lock inside it) while the main thread looks at ``stopped``
every ``poll_s``: a signal ends the wait within that time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def heeding(call: Callable[[], T], stopped: Callable[[], None], poll_s: float) -> T:
    """``call()``, its result or its exception, while ``stopped()`` is called every
    ``poll_s`` in this thread: an exception ``stopped`` raises ends the wait at once (the
    helper thread is left behind, a daemon blocked in the call, ended with the process)."""
    outcome: list[tuple[bool, object]] = []

    def target() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as err:  # handed to the caller, whatever it is
            outcome.append((False, err))

    helper = threading.Thread(target=target, name="ddpimg-heeding", daemon=True)
    helper.start()
    while True:
        helper.join(poll_s)
        if outcome:
            break
        stopped()
    done, value = outcome[0]
    if not done:
        raise value  # type: ignore[misc]  # an exception, see target()
    return value  # type: ignore[return-value]  # call()'s result
