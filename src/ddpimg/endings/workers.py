"""The verdict of ``train --nproc-per-node``'s launcher on its workers' exits.

torch's agent (the launcher's engine, as torchrun's) stops every other worker with SIGTERM
once one has failed, then reports every exit in the order it saw them. A worker's own
status then says what *it* made of that: a survivor that named the lost rank exits 5, one
that took the agent's SIGTERM for a preemption signal would exit 75. None of these is the
cause; the cause is the first exit that is not such a consequence: a worker killed by a
signal (no word of its own: the launcher names it, its host, the signal and its usual
cause) or a worker's own failure (1 for an error, 2 for a user error, ...). Only when every
exit is a consequence (a preemption on every rank, a lost rank named by the others, Ctrl-C)
does the most telling of them decide: a lost rank, then preemption, then interruption.

The order is the agent's: it polls its workers (every 0.5 s) and lists the ones it found
ended before it stopped the others first. A survivor of a killed rank names it only after
the stall watch found that rank silent (3 heartbeats, at least 2 s), and it exits with a
consequence (5) anyway, so no race between the two decides the verdict. The agent's own
signals are consequences too: SIGTERM to every worker still running once one has ended
(a worker that had not yet left when it came, in its interpreter's shutdown, dies of it),
and SIGKILL ``AGENT_KILL_AFTER_S`` later to one that has not ended by then.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

from ddpimg import exitcodes
from ddpimg.endings.signals import killed_message, killed_status, signal_name

# A worker's status that only follows from another's failure or from outside (see above).
CONSEQUENCES = (exitcodes.RANK_LOST, exitcodes.PREEMPTED, exitcodes.INTERRUPTED)
# torch's agent stops the other workers with SIGTERM, then SIGKILL after 30 s
# (LocalElasticAgent._shutdown's timeout); its failures' timestamps are whole seconds.
AGENT_KILL_AFTER_S = 30
_TIMESTAMP_SLACK_S = 2
# Statuses whose worker printed why (``ddpimg: error: ...``, the preemption or Ctrl-C line):
# the launcher adds nothing of its own.
SELF_EXPLAINED = frozenset({
    exitcodes.USAGE, exitcodes.RENDEZVOUS_FAILED, exitcodes.CHECK_FAILED, *CONSEQUENCES,
})  # fmt: skip


@dataclass(frozen=True)
class WorkerExit:
    """One worker's end as the launcher saw it: ``code`` is its exit status, or minus the
    signal that killed it."""

    rank: int
    code: int
    pid: int | None = None
    host: str = ""
    timestamp: float | None = None  # when the launcher saw it end

    @property
    def killed(self) -> bool:
        return self.code < 0

    @property
    def own_failure(self) -> bool:
        return self.code > 0 and self.code not in CONSEQUENCES

    def words(self) -> str:
        """``rank 1 (host n1, pid 42)``."""
        where = f"host {self.host}" + ("" if self.pid is None else f", pid {self.pid}")
        return f"rank {self.rank} ({where})"


@dataclass(frozen=True)
class LauncherVerdict:
    """The launcher's exit status; ``cause``: the worker whose exit decided it (None when
    only consequences came); ``message`` and ``hint``: the line the launcher prints last
    (None: the workers said it themselves); ``error``: whether that line is an error."""

    status: int
    cause: WorkerExit | None = None
    message: str | None = None
    hint: str | None = None
    error: bool = True


def local_verdict(exits: Sequence[WorkerExit], *, script: bool = False) -> LauncherVerdict:
    """The verdict on ``exits`` (the failed workers, in the order the launcher saw them
    end); ``script``: the workers run a user's script (the hint says how it continues)."""
    cause = next((item for item in exits if _is_cause(item, exits[0])), None)
    if cause is None:
        codes = {item.code for item in exits}
        status = next((code for code in CONSEQUENCES if code in codes), exitcodes.TRAINING_FAILED)
        return LauncherVerdict(status)
    if cause.killed:
        message, hint = killed_message(
            cause.rank, cause.host, cause.pid, -cause.code, script=script
        )
        return LauncherVerdict(killed_status(-cause.code), cause, message, hint)
    if cause.code in SELF_EXPLAINED:
        return LauncherVerdict(cause.code, cause)
    return LauncherVerdict(
        cause.code,
        cause,
        f"{cause.words()} failed with exit status {cause.code} (its own error, above); the "
        "launcher stopped the other ranks",
        error=False,
    )


def _is_cause(item: WorkerExit, first: WorkerExit) -> bool:
    """Whether ``item`` ended by itself or by something from outside, as against by the
    agent stopping it after ``first`` (the first exit the agent saw) had ended."""
    if item.own_failure:
        return True
    if not item.killed:
        return False
    if item is first:
        return True
    if -item.code == signal.SIGTERM:
        return False
    if -item.code == signal.SIGKILL and item.timestamp is not None and first.timestamp:
        return item.timestamp - first.timestamp < AGENT_KILL_AFTER_S - _TIMESTAMP_SLACK_S
    return True


def describe_code(code: int) -> str:
    """``exit status 1``, ``SIGKILL``."""
    return signal_name(-code) if code < 0 else f"exit status {code}"
