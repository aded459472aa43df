"""A plain DDP loop (ddpimg's API: progress and preemption) that meets one fault where the
chaos matrix asks, so that no race decides the phase it lands in.

    train --script chaos_faults.py MARKS FAULT PHASE

FAULT: SIGKILL or SIGSEGV (rank 1 does it to itself in PHASE), raise (rank 0 raises in
PHASE), SIGTERM or SIGUSR2 (sent from outside: every rank creates ``MARKS/PHASE-<rank>``
once in PHASE and stays there until the test, having sent the signal, creates
``MARKS/sent``; bounded). PHASE: step (in the
middle of step 3), checkpoint (rank 0 writing its checkpoint after step 3, in pieces),
final (every step done, before the final barrier). A step is also a preemption check
(``ddpimg.preemption_requested``), as in a loop written for ddpimg; the run has STEPS
steps.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import ddpimg

STEPS = 6
AT_STEP = 3
WAIT_S = 60.0  # a hang guard: the test signals within a second or two

marks, fault, phase = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
received: list[int] = []


def here(where: str) -> None:
    """The fault, if this is its phase."""
    if where != phase:
        return
    if fault in ("SIGKILL", "SIGSEGV") and rank == 1:
        if fault == "SIGKILL":
            os.kill(os.getpid(), signal.SIGKILL)
        ctypes.string_at(0)  # a read of address 0: SIGSEGV, as a crash in native code
    if fault == "raise" and rank == 0:
        raise RuntimeError(f"rank 0's own error in phase {where}")
    if fault in ("SIGTERM", "SIGUSR2"):
        (marks / f"{where}-{rank}").touch()
        deadline = time.monotonic() + WAIT_S
        while not (marks / "sent").exists() and time.monotonic() < deadline:
            time.sleep(0.02)


def save(step: int) -> None:
    if rank == 0:
        with open(marks / "checkpoint.pt", "wb") as stream:
            for piece in range(20):
                stream.write(bytes(4096))
                if piece == 10:
                    here("checkpoint")
    else:
        here("checkpoint")
    dist.barrier()


for step in range(1, STEPS + 1):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    if step == AT_STEP:
        here("step")
    optimizer.step()
    ddpimg.progress(step)
    if step == AT_STEP:
        save(step)
    if ddpimg.preemption_requested():
        save(step)
        sys.exit(75)
here("final")
dist.barrier()
