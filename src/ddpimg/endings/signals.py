"""A rank killed by a signal: its name, its usual cause, and the one message that says so.

A process killed by a signal leaves no word of its own (SIGKILL cannot be caught; a crash in
native code may not get to write anything): what its launcher saw is all there is. The
causes below are the ones seen on clusters: the kernel's out-of-memory killer sends SIGKILL
(``dmesg`` on the node says "Out of memory: Killed process PID"; Slurm's cgroup records the
step's peak memory as ``MaxRSS``, and may kill the step itself for exceeding its memory),
and a fault in C, C++ or CUDA code (a library, a driver, a bad build) ends in SIGSEGV,
SIGBUS, SIGILL or SIGFPE, or SIGABRT from a failed assertion or an uncaught C++ exception.
"""

from __future__ import annotations

import signal

from ddpimg.exitcodes import INTERRUPTED, RANK_LOST

# A rank's process killed by one of these was stopped from outside, not by a fault of its own.
_OUTSIDE = {
    "SIGKILL": (
        "most often the out-of-memory killer (the kernel's, or Slurm's for a step over its "
        "memory), else a stall watch's sentinel (its line above), scancel or the time limit"
    ),
    "SIGTERM": "a request to stop that this rank did not act on (--preempt-signals)",
    "SIGHUP": "its terminal or session went away",
    "SIGQUIT": "a request to stop (Ctrl-\\)",
    "SIGINT": "Ctrl-C",
    "SIGPIPE": "a pipe it wrote to was closed (its output went to a program that exited)",
}
_NATIVE = {
    "SIGSEGV": "a crash in native code (a C, C++ or CUDA library, or a bad build)",
    "SIGBUS": "a crash in native code, or a file it had mapped (a dataset, /dev/shm) shrank "
    "or its file system went away",
    "SIGILL": "native code built for another CPU than this node's",
    "SIGFPE": "a crash in native code (an integer division by zero)",
    "SIGABRT": "an abort in native code (a failed assertion, an uncaught C++ exception: "
    "NCCL, CUDA, a library's own check)",
}


def signal_name(number: int) -> str:
    """``9`` -> ``SIGKILL``; a number Python does not name -> ``signal 42``."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def signal_cause(name: str) -> str:
    """What usually sends ``name`` (``SIGKILL``) to a training process."""
    return _OUTSIDE.get(name) or _NATIVE.get(name) or "a signal from outside, or a crash"


def killed_status(number: int) -> int:
    """The run's exit status when a rank was killed by signal ``number``: a lost rank
    (``RANK_LOST``: requeue, the last checkpoint is intact), except Ctrl-C."""
    return INTERRUPTED if number == signal.SIGINT else RANK_LOST


def killed_message(
    rank: int, host: str, pid: int | None, number: int, *, script: bool = False
) -> tuple[str, str]:
    """The verdict on a rank that a signal killed, and its hint: ``rank 1 (host node7, pid
    4242) was killed by SIGKILL: most often the out-of-memory killer ...``."""
    name = signal_name(number)
    where = f"host {host}" + ("" if pid is None else f", pid {pid}")
    message = f"rank {rank} ({where}) was killed by {name}: {signal_cause(name)}"
    again = (
        "run the same command again (a Trainer resumes from its newest checkpoint)"
        if script
        else "run again with --resume auto (the last checkpoint is intact)"
    )
    if name == "SIGKILL":
        look = (
            f"`dmesg | grep -i -e oom -e 'killed process'` on {host} names the out-of-memory "
            "killer's victims, `sacct -j JOBID -o JobID,MaxRSS,ReqMem,State` the memory a "
            "Slurm step used; give it more memory (--mem, fewer ranks per node, a smaller "
            "batch)"
        )
    elif name in _NATIVE:
        look = (
            f"that rank's log on {host} (PYTHONFAULTHANDLER=1 prints the Python stack at a "
            "crash; `coredumpctl` or a core file has the native one)"
        )
    else:
        look = f"who signalled rank {rank} on {host}"
    return message, f"{look}; then {again}"
