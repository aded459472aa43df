"""What the launchers themselves print about a rank that died, read back into ddpimg's own
words, so that a job's log (``ddpimg follow``, ``ddpimg fetch``) ends with a verdict that
names the rank, its host, the signal and its usual cause whichever launcher ran it:

- torchrun (and torch's agent under ``train --nproc-per-node``): ``failed (exitcode: -9)
  local_rank: 1 (pid: 4242) of binary: ...``, and its summary's ``rank : 1 (local_rank:
  1)`` / ``host : node7`` / ``exitcode : -9 (pid: 4242)``;
- srun: ``srun: error: node7: task 1: Killed`` (``tasks 2-3: Segmentation fault``), the
  signal spelled as ``strsignal(3)`` spells it;
- Open MPI's mpirun: ``mpirun noticed that process rank 1 with PID 4242 on node node7
  exited on signal 9 (Killed).``

Read from text someone else's program wrote: bounded in lines and length, and every value
taken only in the form these launchers give it.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from ddpimg.endings.signals import killed_message

MAX_LINES = 2000
MAX_LINE = 1000

# strsignal(3)'s words (glibc) for the signals that end training processes.
_STRSIGNAL = {
    "Killed": signal.SIGKILL,
    "Segmentation fault": signal.SIGSEGV,
    "Bus error": signal.SIGBUS,
    "Aborted": signal.SIGABRT,
    "Illegal instruction": signal.SIGILL,
    "Floating point exception": signal.SIGFPE,
    "Terminated": signal.SIGTERM,
    "Hangup": signal.SIGHUP,
    "Interrupt": signal.SIGINT,
}
_HOST = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}"
_SRUN = re.compile(
    rf"^srun: error: (?P<host>{_HOST}): tasks? (?P<ranks>\d{{1,7}}(?:[-,]\d{{1,7}})*): "
    rf"(?P<what>{'|'.join(map(re.escape, _STRSIGNAL))})$"
)
_MPIRUN = re.compile(
    rf"process rank (?P<rank>\d{{1,7}}) with PID (?P<pid>\d{{1,10}}) on node (?P<host>{_HOST}) "
    r"exited on signal (?P<signal>\d{1,3})\b"
)
_AGENT = re.compile(
    r"failed \(exitcode: (?P<code>-\d{1,3})\) local_rank: (?P<rank>\d{1,7}) "
    r"\(pid: (?P<pid>\d{1,10})\)"
)
_SUMMARY_FIELD = re.compile(r"^\s{2,}(?P<key>host|rank|exitcode)\s*: (?P<value>.{1,300})$")
_SUMMARY_RANK = re.compile(r"^(?P<rank>\d{1,7})\b")
_SUMMARY_CODE = re.compile(r"^(?P<code>-\d{1,3}) \(pid: (?P<pid>\d{1,10})\)")


@dataclass(frozen=True)
class KilledRank:
    """A rank a launcher said was killed by ``signal``; ``host`` and ``pid`` when it said."""

    launcher: str
    rank: int
    signal: int
    host: str = ""
    pid: int | None = None

    def verdict(self, *, script: bool = False) -> tuple[str, str]:
        """ddpimg's message and hint for it (``signals.killed_message``)."""
        return killed_message(
            self.rank, self.host or "unknown", self.pid, self.signal, script=script
        )


def _ranks(text: str) -> list[int]:
    """``0-1,3`` -> ``[0, 1, 3]`` (srun's task lists), at most a few thousand."""
    found: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        found.extend(range(low, min(high, low + 4096) + 1))
    return found


def killed_ranks(log: str) -> list[KilledRank]:
    """Every rank the launchers' lines in ``log`` say was killed by a signal, in the order
    they say it, each rank once (its first report). torch's agent's own line names a local
    rank: it counts only when its summary (global rank and host) is not in the log."""
    found: dict[int, KilledRank] = {}
    agent: dict[int, KilledRank] = {}
    summary: dict[str, str] = {}
    for raw in log.splitlines()[-MAX_LINES:]:
        line = raw.rstrip()[:MAX_LINE]
        if match := _AGENT.search(line):
            rank = int(match["rank"])
            agent.setdefault(
                rank, KilledRank("torchrun", rank, -int(match["code"]), "", int(match["pid"]))
            )
            continue
        for item in _line_reports(line, summary):
            found.setdefault(item.rank, item)
    return list(found.values()) or list(agent.values())


def _line_reports(line: str, summary: dict[str, str]) -> list[KilledRank]:
    if match := _SRUN.search(line):
        number = int(_STRSIGNAL[match["what"]])
        return [KilledRank("srun", rank, number, match["host"]) for rank in _ranks(match["ranks"])]
    if match := _MPIRUN.search(line):
        pid = int(match["pid"]) or None  # Open MPI 4 often says PID 0
        return [KilledRank("mpirun", int(match["rank"]), int(match["signal"]), match["host"], pid)]
    if match := _SUMMARY_FIELD.match(line):
        summary[match["key"]] = match["value"].strip()
        if match["key"] != "exitcode":
            return []
        rank, code = (
            _SUMMARY_RANK.match(summary.get("rank", "")),
            _SUMMARY_CODE.match(summary["exitcode"]),
        )
        host = summary.get("host", "")
        summary.clear()
        if rank is None or code is None or not re.fullmatch(_HOST, host):
            return []
        return [
            KilledRank("torchrun", int(rank["rank"]), -int(code["code"]), host, int(code["pid"]))
        ]
    return []
