"""The origin tutorials' MNIST trainer (pytorch/examples ``mnist/main.py``): the same CNN,
NLL loss, Adadelta and StepLR(step_size=1, gamma) after every epoch, test batch 1000. Only
its dropout layers differ: GlobalBatchDropout, so the loss does not depend on the rank
count."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from ddpimg.train.dropout import DropoutContext, GlobalBatchDropout
from ddpimg.train.tasks.mnist.data import load_mnist
from ddpimg.train.tasks.mnist.options import LEARNING_RATE

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Dataset


class MnistNet(nn.Module):
    """conv(1,32,3,1) -> relu -> conv(32,64,3,1) -> relu -> max_pool(2) -> dropout(0.25) ->
    flatten -> fc(9216,128) -> relu -> dropout(0.5) -> fc(128,10) -> log_softmax."""

    def __init__(self, dropout: DropoutContext) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = GlobalBatchDropout(0.25, layer=1, context=dropout)
        self.dropout2 = GlobalBatchDropout(0.5, layer=2, context=dropout)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


class MnistTask:
    """``train mnist``."""

    eval_batch_size = 1000

    def __init__(self, config: TrainConfig, ctx: DistContext) -> None:
        self.config = config
        self.device = ctx.device
        self._facts: dict[str, Any] = {}

    def datasets(self) -> tuple[Dataset, Dataset]:
        data = load_mnist(
            self.config.data, self.config.train_samples, self.config.first_eval_samples
        )
        self._facts = {
            "source": data.source,
            "train_samples": len(data.train),
            "eval_samples": len(data.test),
        }
        return data.train.to(self.device), data.test.to(self.device)

    def data_facts(self) -> dict[str, Any]:
        return self._facts

    def build_model(self, dropout: DropoutContext) -> nn.Module:
        return MnistNet(dropout).to(self.device)

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # float(): under bf16 autocast the loss is still reduced in fp32.
        return F.nll_loss(output.float(), target, reduction="none")

    def correct(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (output.argmax(dim=1) == target).sum()

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        learning_rate = self.config.learning_rate(LEARNING_RATE)
        return torch.optim.Adadelta(model.parameters(), lr=learning_rate)

    def fingerprint(self) -> dict[str, int]:
        return {}  # no BatchNorm, one shape

    def throughput(self, samples_per_s: float, world_size: int) -> dict[str, float | None]:
        return {}
