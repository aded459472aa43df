"""What the reference loops share: the process group the tutorials set up, the data order,
and the line they print for the benchmark driver.

The tutorials shuffle with DistributedSampler; here the sampler replays ddpimg's epoch order
(``ddpimg.train.sharding.epoch_order``, global batch i = rows i*G .. (i+1)*G, rank r takes
its b-row slice), so both loops see the same samples at every step and their losses can be
compared. Everything else is written the tutorials' way.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from ddpimg.train.sharding import epoch_order


def setup(device_type: str = "cpu") -> tuple[int, int, torch.device]:
    """init_process_group from torchrun's variables (defaults: one process on this host),
    gloo on the CPU and nccl on a GPU, as the tutorials do; rank, world size, device."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    device = torch.device("cpu")
    if device_type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    return rank, world_size, device


def device_ids(device: torch.device) -> list[int] | None:
    """DDP's ``device_ids``: the GPU this process drives, None on the CPU."""
    return [device.index] if device.type == "cuda" else None


class SameOrderSampler(Sampler[int]):
    """This rank's indices of epoch ``epoch`` in ddpimg's order (whole global batches only)."""

    def __init__(self, num_samples: int, per_rank: int, rank: int, world_size: int, seed: int):
        self.num_samples, self.per_rank = num_samples, per_rank
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.epoch = 1

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        order = epoch_order(self.num_samples, self.seed, self.epoch)
        global_batch = self.per_rank * self.world_size
        for step in range(self.num_samples // global_batch):
            start = step * global_batch + self.rank * self.per_rank
            yield from order[start : start + self.per_rank].tolist()

    def __len__(self) -> int:
        return self.num_samples // (self.per_rank * self.world_size) * self.per_rank


def report(result: dict[str, float]) -> None:
    """The last stdout line, read by benchmarks/bench.py."""
    print("RESULT " + json.dumps(result), flush=True)
    sys.stdout.flush()


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
