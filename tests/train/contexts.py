"""Distributed contexts for the trainer tests, without a process group behind them (the
``ctx`` fixture adds one)."""

from __future__ import annotations

import torch

from ddpimg.runtime.context import DistContext
from ddpimg.runtime.device import rank_cpu_share


def single_process(device: str | torch.device = "cpu", world_size: int = 1) -> DistContext:
    """Rank 0 of ``world_size`` ranks, on ``device``, on one node, with this machine's CPU
    share; torch's threads are left as the test process has them."""
    return DistContext(
        rank=0,
        world_size=world_size,
        local_rank=0,
        local_world_size=world_size,
        node_rank=0,
        num_nodes=1,
        device=torch.device(device),
        backend="gloo",
        timeout_s=60.0,
        cpu_share=rank_cpu_share(world_size, rank_is_task=False),
        cpu_threads_from_share=False,
        run_info={"source": "single", "site": "local"},
    )
