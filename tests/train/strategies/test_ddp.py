from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from ddpimg.runtime.context import DistContext
from ddpimg.train.options import TrainConfig
from ddpimg.train.strategies import STRATEGIES


def test_wraps_in_ddp_and_steps(ctx: DistContext) -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    strategy = STRATEGIES["ddp"](TrainConfig(), ctx)
    wrapped = strategy.wrap(model, optimizer)
    assert isinstance(wrapped, DistributedDataParallel)
    assert wrapped.device_ids is None
    before = model.weight.detach().clone()
    strategy.backward(wrapped(torch.ones(4, 3)).sum())
    assert model.weight.grad is not None
    strategy.step()
    assert not torch.equal(before, model.weight)
    strategy.zero_grad()
    assert model.weight.grad is None
