"""A deliberate hang, for the runbook's flight-recorder step. Run under torchrun:

    python -m torch.distributed.run --standalone --nproc-per-node N hang.py TRACE_DIR TIMEOUT_S

Each rank meets the others through ddpimg's runtime (``runtime.initialize``, as ``train``
does, so the flight recorder is switched on the way ddpimg switches it on, dumping into
TRACE_DIR), runs one all-reduce that completes, then one that never does:

* on a GPU (NCCL; one rank, since NCCL refuses two ranks on one GPU): a kernel that spins for
  minutes (``torch.cuda._sleep``) holds the stream the all-reduce waits on. ProcessGroupNCCL's
  watchdog times the collective out after TIMEOUT_S and writes the rank's flight record to
  ``TRACE_DIR/rank_0``. It does not end the process itself: measured on an H200 (torch
  2.11.0+cu130, NCCL 2.28.9, 2026-11-26), under torchrun, which sets
  TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (ddpimg keeps a value already set), the log has no line of
  the watchdog's own tear-down, presumably because its abort of the communicator waits behind
  the spinning kernel, which is not NCCL's and which no NCCL abort stops. The process is ended
  by the watchdog's monitor, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC after the dump (SIGABRT,
  "Terminating the process after attempting to dump debug info"): 480 s by default, too long
  for the runbook's command limit, so this script sets 30 s (measured: the dump 16 s after
  the hang began, the end 30 s later). A process still alive
  WATCHDOG_GRACE_S after the hang began exits 3: neither the watchdog nor its monitor acted.
* on the CPU (the dry run; Gloo, two ranks): the last rank skips the second all-reduce and rank
  0's times out. Gloo has no dump on timeout, so each rank writes its recorder's buffer itself
  where NCCL's watchdog would (torch's ``_dump_fr_trace``), naming the default group in
  ``pg_config`` as NCCL's dump does: Gloo's recorder leaves that name empty (torch 2.14), and
  torchfrtrace cannot match its entries without it. Exit 0 when rank 0's all-reduce timed out.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ddpimg.host import short_hostname
from ddpimg.plan import build_plan
from ddpimg.runtime import initialize
from ddpimg.runtime.flight_recorder import BUFFER_NAMES, DEFAULT_ENTRIES, FILE_PREFIX

WATCHDOG_GRACE_S = 90.0
HEARTBEAT_TIMEOUT = "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"
HEARTBEAT_TIMEOUT_S = "30"
# Cycles of the spinning kernel: minutes at any clock a GPU runs at.
SPIN_CYCLES = 600 * 2_000_000_000
ELEMENTS = 1 << 16


def write_gloo_record(trace_dir: Path, rank: int) -> None:
    import torch._C._distributed_c10d as c10d

    record = pickle.loads(c10d._dump_fr_trace())  # type: ignore[attr-defined]
    groups = {entry["process_group"] for entry in record["entries"]}
    ranks = str(list(range(dist.get_world_size())))
    record["pg_config"] = {
        name: {"name": name, "desc": desc, "ranks": ranks} for name, desc in groups
    }
    trace_dir.mkdir(parents=True, exist_ok=True)
    (trace_dir / f"{FILE_PREFIX}{rank}").write_bytes(pickle.dumps(record))


def main(trace_dir: Path, timeout_s: float) -> int:
    if torch.cuda.is_available():
        # Read when the process group is made: the monitor's wait before it ends the process.
        os.environ.setdefault(HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_S)
    else:
        # ddpimg switches the recorder on for NCCL only (Gloo cannot dump on a timeout).
        os.environ.setdefault(BUFFER_NAMES[0], str(DEFAULT_ENTRIES))
    plan = build_plan(os.environ, short_hostname())
    ctx = initialize(plan, timeout_s=timeout_s, trace_dir=str(trace_dir))
    tensor = torch.ones(ELEMENTS, device=ctx.device)
    dist.all_reduce(tensor)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda._sleep(SPIN_CYCLES)  # type: ignore[no-untyped-call]
        dist.all_reduce(tensor)
        time.sleep(timeout_s + WATCHDOG_GRACE_S)
        print(f"hang: rank {ctx.rank}: the NCCL watchdog did not end the process", flush=True)
        return 3
    timed_out = False
    if ctx.rank == ctx.world_size - 1:
        time.sleep(timeout_s + 2)
    else:
        try:
            dist.all_reduce(tensor)
        except RuntimeError as err:
            timed_out = True
            print(f"hang: rank {ctx.rank}: all-reduce timed out: {str(err)[:200]}", flush=True)
    write_gloo_record(trace_dir, ctx.rank)
    # The group holds a collective that never finished: exit without tearing it down.
    sys.stdout.flush()
    os._exit(0 if timed_out or ctx.rank == ctx.world_size - 1 else 4)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), float(sys.argv[2])))
