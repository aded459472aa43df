"""``ddpimg doctor``'s transport check around its all-reduce: NCCL's INIT/NET debug output to
a per-rank file (set before the process group exists), then parsed and judged against the
site profile (:mod:`ddpimg.hardware.nccl_log`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ddpimg.hardware.nccl_log import TransportCheck, debug_env, diagnose, parse, summary
from ddpimg.plan import LaunchPlan

SKIPPED = "NCCL transport check skipped: backend {backend} (NCCL runs only on GPUs)"


def start(backend: str, rank: int) -> Path | None:
    """Send NCCL's INIT/NET decisions to a file of this rank's; None for a non-NCCL backend."""
    if backend != "nccl":
        return None
    log = Path(tempfile.mkdtemp(prefix="ddpimg-nccl-")) / f"rank{rank}.log"
    os.environ.update(debug_env(str(log)))
    return log


def finish(
    log: Path | None,
    backend: str,
    plan: LaunchPlan,
    busbw_gbps: float,
    shm_gib: float,
) -> tuple[str, list[str]]:
    """(one line for the output, the problems found)."""
    if log is None:
        return SKIPPED.format(backend=backend), []
    try:
        text = log.read_text(errors="replace")
    except OSError:
        text = ""
    finally:
        log.unlink(missing_ok=True)
        log.parent.rmdir()
    found = parse(text)
    fabric = plan.site.fabric
    check = TransportCheck(
        expected=fabric.transport,
        site=plan.site.name,
        num_nodes=plan.topology.num_nodes,
        local_world_size=plan.topology.local_world_size,
        busbw_gbps=busbw_gbps,
        min_busbw_gbps=fabric.min_busbw_gbps,
        shm_gib=shm_gib,
    )
    return summary(found, fabric.transport), diagnose(found, check)
