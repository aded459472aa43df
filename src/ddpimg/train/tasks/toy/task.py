"""``train toy``: the model-parallel tutorial (PyTorch's "Combining DDP with model
parallelism"): a 32->32 "head" and a 32->10 "tail" on two GPUs of the same process, the
activations moved from one to the other, DDP across the replicas, Adam 1e-4 and
cross-entropy on 2^20 synthetic rows (row x = [x]*32, label x % 10).

``--gpus-per-replica`` (default 2) GPUs per process: the runtime binds the first,
``local rank x gpus-per-replica`` (``ddpimg.runtime.device``; it refuses a node whose GPU
count is not processes x GPUs per replica), the head runs there and the tail on the next.
On the CPU both parts run on the CPU. Only a strategy that takes a model spread over
several devices (``StrategySpec.takes_spread_model``: DDP; DeepSpeed and FSDP move or shard
the whole model on one device) runs it on two GPUs; the others need ``--gpus-per-replica 1``.

The tail's logits come back to the head's device: the loop, the loss reduction and the
collectives then see one device per rank, as with every other trainer. The rows are stored
as one value each and widened to 32 columns per batch. The tutorial has no evaluation set:
evaluation runs over the first ``--eval-samples`` rows (default 16384).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from ddpimg.train.tasks.base import InMemoryDataset
from ddpimg.train.tasks.datasets import sample_count
from ddpimg.train.tasks.toy.options import LEARNING_RATE, gpus_per_replica

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.dropout import DropoutContext
    from ddpimg.train.tasks.base import Dataset

ROWS = 2**20
EVAL_ROWS = 2**14
WIDTH = 32
NUM_CLASSES = 10


class ToyModel(nn.Module):
    """head: Linear(32, 32) on ``head_device`` -> relu -> tail: Linear(32, 10) on
    ``tail_device``; the output returns to ``head_device``."""

    def __init__(self, head_device: torch.device, tail_device: torch.device) -> None:
        super().__init__()
        self.head_device = head_device
        self.tail_device = tail_device
        self.head = nn.Linear(WIDTH, WIDTH).to(head_device)
        self.tail = nn.Linear(WIDTH, NUM_CLASSES).to(tail_device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = F.relu(self.head(x.to(self.head_device)))
        logits: torch.Tensor = self.tail(hidden.to(self.tail_device))
        return logits.to(self.head_device)


@dataclass(frozen=True)
class ToyRows(InMemoryDataset):
    """Rows ``values`` (float (N,)); row x is [x]*32 with label x % 10."""

    values: torch.Tensor

    def __len__(self) -> int:
        return int(self.values.shape[0])

    @property
    def device(self) -> torch.device:
        return self.values.device

    def batch(self, rows: torch.Tensor | slice) -> tuple[torch.Tensor, torch.Tensor]:
        values = self.values[rows]
        return values.unsqueeze(1).expand(-1, WIDTH), values.long() % NUM_CLASSES


def tail_device(head: torch.device, gpus_per_replica: int) -> torch.device:
    """Where the tail runs: the replica's last GPU (the head's one with one GPU per
    replica); the CPU stays the CPU."""
    if head.type != "cuda":
        return head
    index = head.index if head.index is not None else torch.cuda.current_device()
    return torch.device("cuda", index + gpus_per_replica - 1)


class ToyTask:
    """``train toy``."""

    eval_batch_size = 4096

    def __init__(self, config: TrainConfig, ctx: DistContext) -> None:
        self.config = config
        self.device = ctx.device

    def datasets(self) -> tuple[Dataset, Dataset]:
        source = "the toy set"
        train = sample_count(ROWS, self.config.train_samples, "--train-samples", "training", source)
        test = sample_count(
            EVAL_ROWS, self.config.first_eval_samples, "--eval-samples", "evaluation", source
        )
        return (
            ToyRows(torch.arange(train, dtype=torch.float32, device=self.device)),
            ToyRows(torch.arange(test, dtype=torch.float32, device=self.device)),
        )

    def data_facts(self) -> dict[str, Any]:
        return {"source": "the toy rows"}

    def build_model(self, dropout: DropoutContext) -> nn.Module:
        return ToyModel(self.device, tail_device(self.device, gpus_per_replica(self.config)))

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.float(), target, reduction="none")

    def correct(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (output.argmax(dim=1) == target).sum()

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        learning_rate = self.config.learning_rate(LEARNING_RATE)
        return torch.optim.Adam(model.parameters(), lr=learning_rate)

    def fingerprint(self) -> dict[str, int]:
        return {}  # no BatchNorm, one shape

    def throughput(self, samples_per_s: float, world_size: int) -> dict[str, float | None]:
        return {}
