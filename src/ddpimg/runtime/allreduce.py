"""Two measurements of an all-reduce: whether it adds up, and its bus bandwidth (``ddpimg
doctor`` among all ranks, ``links`` between two nodes)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup

CORRECTNESS_ELEMENTS = 1 << 20
BANDWIDTH_BYTES = {"cpu": 16 << 20, "cuda": 256 << 20}
BANDWIDTH_ITERATIONS = 5


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
