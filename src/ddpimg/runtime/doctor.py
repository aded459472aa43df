"""``ddpimg doctor``'s checks on one rank: what it sees (host, device, interfaces, /dev/shm),
whether an all-reduce adds up, and its bus bandwidth. The command (``cli/doctor_cmd.py``)
gathers them, prints them and sets the exit status."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddpimg.errors import LauncherError
from ddpimg.plan import LaunchPlan
from ddpimg.runtime.interfaces import interface_names, ipv4_address, missing_interfaces

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup

CORRECTNESS_ELEMENTS = 1 << 20
BANDWIDTH_BYTES = {"cpu": 16 << 20, "cuda": 256 << 20}
BANDWIDTH_ITERATIONS = 5


@dataclass
class RankReport:
    """What one rank sees. Gathered to rank 0."""

    rank: int
    host: str
    local_rank: int
    local_world_size: int
    node_rank: int
    device: str = ""
    visible_gpus: str = ""
    interfaces: dict[str, str] = field(default_factory=dict)  # profile's interface -> IPv4
    shm_gib: float = 0.0
    removed: int = 0
    problems: list[str] = field(default_factory=list)


def local_report(plan: LaunchPlan) -> RankReport:
    topo = plan.topology
    report = RankReport(
        rank=topo.rank,
        host=socket.gethostname().split(".")[0],
        local_rank=topo.local_rank,
        local_world_size=topo.local_world_size,
        node_rank=topo.node_rank,
        visible_gpus=os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"),
        removed=len(plan.removed),
    )
    for name in missing_interfaces(plan.site.interfaces):
        report.problems.append(
            f"interface {name} (profile {plan.site.name}) does not exist on {report.host}; "
            f"present: {', '.join(interface_names())}"
        )
    for name in plan.site.interfaces:
        report.interfaces[name] = ipv4_address(name) or "-"
    try:
        stat = os.statvfs("/dev/shm")
        report.shm_gib = stat.f_frsize * stat.f_blocks / 2**30
    except OSError:
        report.problems.append("/dev/shm is missing (NCCL and DataLoader workers need it)")
    return report


def bind(report: RankReport) -> torch.device:
    """This rank's device; a layout problem is recorded in ``report`` (the CPU then)."""
    import torch

    from ddpimg.runtime.device import bind_device

    try:
        return bind_device(report.local_rank, report.local_world_size)
    except LauncherError as err:
        report.problems.append(err.message)
        return torch.device("cpu")


def check_allreduce(device: torch.device, world_size: int, rank: int) -> str | None:
    """Sum of (rank + 1) over all ranks must be W(W+1)/2 in every element."""
    import torch
    import torch.distributed as dist

    tensor = torch.full((CORRECTNESS_ELEMENTS,), float(rank + 1), device=device)
    dist.all_reduce(tensor)
    expected = world_size * (world_size + 1) / 2
    wrong = int((tensor != expected).sum().item())
    if wrong:
        return (
            f"all-reduce wrong in {wrong} of {CORRECTNESS_ELEMENTS} elements "
            f"(expected {expected:g})"
        )
    return None


def measure_bus_bandwidth(
    device: torch.device,
    world_size: int,
    group: ProcessGroup | None = None,
    nbytes: int | None = None,
    iterations: int = BANDWIDTH_ITERATIONS,
) -> float:
    """All-reduce bus bandwidth in GB/s (nccl-tests' definition: algbw * 2(W-1)/W) among
    the ``world_size`` ranks of ``group`` (default: all), each reducing ``nbytes``."""
    import torch
    import torch.distributed as dist

    if nbytes is None:
        nbytes = BANDWIDTH_BYTES["cuda" if device.type == "cuda" else "cpu"]
    tensor = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dist.all_reduce(tensor, group=group)  # warm-up: connections, buffers
    if device.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor, group=group)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = (time.perf_counter() - start) / iterations
    factor = 2 * (world_size - 1) / world_size if world_size > 1 else 1.0
    return nbytes / elapsed * factor / 1e9
