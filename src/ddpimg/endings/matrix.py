"""Every ending, fault x phase x launcher: the command's exit status, how ddpimg's line that
tells the ending begins (and the launcher's own, if it prints one), what manifest.json says
and what ``ddpimg sbatch``'s job script does with it. One source for the table in
docs/checkpoints-and-failures.md ("Every ending", written by ``table()``; a test compares
them) and for the chaos test's expectations (tests/integration/test_chaos.py runs cells of
it on the real launchers).

Faults: one rank (rank 1) killed by SIGKILL (the out-of-memory killer) or SIGSEGV (a crash
in native code); SIGTERM or SIGUSR2 from the scheduler, to every process of the job, as
Slurm sends them (``scancel --signal``, ``--signal=USR2@120``, preemption); rank 0 raising
an error of its own. Phases: the rendezvous (before the first step), training (a step or a
checkpoint write: the same ending), the final barrier (after the last step and
checkpoint). Launchers: ``train --nproc-per-node`` (ddpimg's own, torch's agent inside),
torchrun, srun, mpirun (Open MPI). The same for the bundled trainers and ``train
--script``, except where a row says so.

In the lines, H stands for a host, P for a pid, N for a number, SIG for the signal's name;
``normalized`` turns a real line into that form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LAUNCHERS = ("train --nproc-per-node", "torchrun", "srun", "mpirun")
FAULTS = ("SIGKILL", "SIGSEGV", "SIGTERM", "SIGUSR2", "raise")
PHASES = ("rendezvous", "step", "checkpoint", "final")
FAULT_WORDS = {
    "SIGKILL": "rank 1 killed by SIGKILL",
    "SIGSEGV": "by SIGSEGV",
    "SIGTERM": "SIGTERM to every process",
    "SIGUSR2": "SIGUSR2",
    "raise": "rank 0 raises alone",
}
PHASE_WORDS = {
    "rendezvous": "rendezvous",
    "step": "a step",
    "checkpoint": "a checkpoint write",
    "final": "final barrier",
}

# The verdict lines, in their normalized form.
KILLED = "ddpimg: error: rank N (host H, pid P) was killed by SIG: "
START_STOPPED = "ddpimg: SIG arrived while the ranks were meeting, before the first step: "
PREEMPTED = "ddpimg: SIG: "
COMPLETED = "ddpimg: completed; "
OWN_FAILED = "ddpimg: rank N (host H, pid P) failed with exit status N (its own error, above)"
NAMES_FAILED = "ddpimg: error: rank N (H) gave up at step N (...): rank N (host H, pid P) failed "
SURVIVOR = "ddpimg: error: rank N (H) gave up at step N (...): rank N (host H, pid P) "
SRUN_TASK = "srun: error: H: task N: Killed (Segmentation fault)"
MPIRUN = "mpirun noticed that process rank N with PID N on node H exited on signal N"
TORCHRUN_ROOT = "ChildFailedError: ... Root Cause ... exitcode : -N"
TORCHRUN_TERM = "SignalException: Process N got signal: N"

REQUEUE = "requeues (resumes from the last checkpoint)"
REQUEUE_LOST = "requeues as a lost rank"
STOPS = "stops (no requeue)"
DONE = "done"


@dataclass(frozen=True)
class Ending:
    """One cell. ``status``: what the command exits with (``None``: 128 + the signal, as
    srun and mpirun report a task killed by it); ``line``: how ddpimg's line that tells the
    ending begins (normalized; "" when no rank can print one); ``launcher``: the launcher's
    own line about it ("" when none); ``manifest``: manifest.json's status and exit status
    and the entry that names the cause ("none": no run directory yet); ``job``: what
    ``ddpimg sbatch``'s job script does; ``note``: why, where it is not obvious."""

    status: int | None
    line: str
    launcher: str
    manifest: str
    job: str
    note: str = ""


@dataclass(frozen=True)
class Row:
    faults: tuple[str, ...]
    phases: tuple[str, ...]
    launchers: tuple[str, ...]
    ending: Ending


_LOCAL, _TORCHRUN, _SRUN, _MPIRUN = LAUNCHERS
_KILLS = ("SIGKILL", "SIGSEGV")
_STOPS = ("SIGTERM", "SIGUSR2")
_TRAINING = ("step", "checkpoint", "final")

ROWS = (
    Row(_KILLS, ("rendezvous",), (_LOCAL,),
        Ending(5, KILLED, "", "none", REQUEUE_LOST)),
    Row(_KILLS, _TRAINING, (_LOCAL,),
        Ending(5, KILLED, "", "failed 5, killed", REQUEUE_LOST,
               "rank 0 names rank 1 first (stopped reporting); the launcher's line comes "
               "last and is recorded")),
    Row(_KILLS, ("rendezvous",), (_TORCHRUN,),
        Ending(1, "", TORCHRUN_ROOT, "none", STOPS,
               "torchrun exits 1 for any failed worker: use train --nproc-per-node")),
    Row(_KILLS, _TRAINING, (_TORCHRUN,),
        Ending(1, SURVIVOR, TORCHRUN_ROOT, "failed 5, rank_lost", STOPS,
               "the other ranks exit 5 naming rank 1; torchrun exits 1 for any failed "
               "worker: use train --nproc-per-node")),
    Row(_KILLS, ("rendezvous",), (_SRUN,),
        Ending(None, "", SRUN_TASK, "none", STOPS,
               "rank 0 waits for rank 1 until --timeout")),
    Row(("SIGKILL",), _TRAINING, (_SRUN,),
        Ending(None, SURVIVOR, SRUN_TASK, "failed 5, rank_lost", REQUEUE_LOST,
               "srun returns 137; the other ranks exit 5 naming rank 1")),
    Row(("SIGSEGV",), _TRAINING, (_SRUN,),
        Ending(None, SURVIVOR, SRUN_TASK, "failed 5, rank_lost", STOPS,
               "srun returns 139; the other ranks exit 5 naming rank 1; the job script "
               "requeues 137 alone")),
    Row(_KILLS, PHASES, (_MPIRUN,),
        Ending(None, "", MPIRUN, "running, or failed 5 with rank_lost", STOPS,
               "mpirun ends the other ranks about 3 s after the death: whether they name "
               "rank 1 first depends on --timeout; ddpimg follow names it from mpirun's "
               "line")),
    Row(_STOPS, ("rendezvous",), (_LOCAL, _SRUN),
        Ending(75, START_STOPPED, "", "none", REQUEUE, "one line, from rank 0")),
    Row(_STOPS, ("step", "checkpoint"), (_LOCAL, _SRUN),
        Ending(75, PREEMPTED, "", "preempted 75", REQUEUE,
               "a write under way ends first; then the checkpoint of the step (a script: "
               "its own, or none when nothing in it acts on preemption)")),
    Row(_STOPS, ("final",), (_LOCAL, _SRUN),
        Ending(0, COMPLETED, "", "completed 0", DONE,
               "the run's work and last checkpoint are done: the signal changes nothing "
               "(a script prints no line of ddpimg's)")),
    Row(("SIGTERM",), PHASES, (_TORCHRUN,),
        Ending(1, PREEMPTED, TORCHRUN_TERM, "preempted 75", STOPS,
               "the ranks act as under train --nproc-per-node; torchrun's own status is 1")),
    Row(("SIGUSR2",), PHASES, (_TORCHRUN,),
        Ending(None, PREEMPTED, "", "preempted 75", STOPS,
               "torchrun does not handle SIGUSR2 and dies of it (140); the ranks act as "
               "under train --nproc-per-node")),
    Row(("SIGUSR2",), PHASES, (_MPIRUN,),
        Ending(75, PREEMPTED, "", "preempted 75", REQUEUE,
               "mpirun passes SIGUSR2 on; each phase as under srun")),
    Row(("SIGTERM",), PHASES, (_MPIRUN,),
        Ending(None, "", "", "running", STOPS,
               "mpirun ends the ranks itself within a second: send SIGUSR2 to mpirun")),
    Row(("raise",), _TRAINING, (_LOCAL,),
        Ending(1, OWN_FAILED, "", "failed 1", STOPS,
               "the others read rank 0's error in the store within a few heartbeats and "
               "exit 1 (a user error: 2 and 1)")),
    Row(("raise",), _TRAINING, (_TORCHRUN, _SRUN, _MPIRUN),
        Ending(1, NAMES_FAILED, "", "failed 1", STOPS,
               "the others read rank 0's error in the store and exit 1, naming it (mpirun: "
               "the first failing rank's status)")),
)  # fmt: skip


def expected(fault: str, phase: str, launcher: str) -> Ending | None:
    """The documented ending of one cell; None for a cell the table leaves out."""
    for row in ROWS:
        if fault in row.faults and phase in row.phases and launcher in row.launchers:
            return row.ending
    return None


_CAUSE = re.compile(r"(gave up at step \d+ )\(.*?\): ")
_PID = re.compile(r"\bpid \d+")
_HOST = re.compile(r"\((?:host )?[A-Za-z0-9][A-Za-z0-9_.-]*(?=[,)])")
_SIG = re.compile(r"\bSIG(?:KILL|SEGV|TERM|USR2|BUS|ABRT|INT)\b")
_NUMBER = re.compile(r"\b\d+\b")


def normalized(line: str) -> str:
    """A real line in the table's form: pids P, hosts H, signal names SIG, numbers N, and a
    survivor's cause in parentheses (what ended its own wait: a collective's error, its
    look at the others' records; which came first is the machine's timing) as ``(...)``."""
    line = _CAUSE.sub(r"\1(...): ", line, count=1)
    line = _PID.sub("pid P", line)
    line = _HOST.sub(lambda m: "(host H" if m.group(0).startswith("(host ") else "(H", line)
    line = _SIG.sub("SIG", line)
    return _NUMBER.sub("N", line)


def _cell(ending: Ending) -> list[str]:
    status = "128 + N" if ending.status is None else str(ending.status)
    return [
        f"`{status}`",
        f"`{ending.line}`" if ending.line else "none",
        f"`{ending.launcher}`" if ending.launcher else "",
        ending.manifest,
        ending.job,
        ending.note,
    ]


def table() -> str:
    """The markdown table of every row."""
    lines = [
        "| fault | phase | launcher | exit status | ddpimg's line begins | the launcher says "
        "| manifest.json | job script | why |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in ROWS:
        faults = ", ".join(FAULT_WORDS[fault] for fault in row.faults)
        phases = ", ".join(PHASE_WORDS[phase] for phase in row.phases)
        launchers = ", ".join(row.launchers)
        lines.append("| " + " | ".join([faults, phases, launchers, *_cell(row.ending)]) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # the table for docs/checkpoints-and-failures.md
    print(table(), end="")
