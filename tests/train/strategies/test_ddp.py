from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ddpimg.errors import DdpimgError
from ddpimg.runtime.context import DistContext
from ddpimg.train.batch import BatchLayout
from ddpimg.train.config import TrainConfig
from ddpimg.train.strategies import STRATEGIES
from ddpimg.train.strategies.base import Strategy
from ddpimg.train.strategies.ddp import DdpStrategy
from tests.train.contexts import single_process
from tests.train.ranks import run_ranks


def test_one_rank_trains_the_bare_module(ctx: DistContext) -> None:
    model = torch.nn.Linear(3, 2)
    config = TrainConfig()
    strategy = STRATEGIES["ddp"].factory(config, ctx, BatchLayout.of(config, 1))
    assert strategy.wrap(model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1)) is model


def test_wraps_in_ddp_and_steps(ctx: DistContext) -> None:
    model = torch.nn.Linear(3, 2)
    # The context of a 2-rank run; DDP itself uses this process's 1-rank group.
    config, two_ranks = TrainConfig(), dataclasses.replace(ctx, world_size=2)
    strategy = STRATEGIES["ddp"].factory(config, two_ranks, BatchLayout.of(config, 2))
    wrapped = strategy.wrap(model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    assert isinstance(wrapped, DistributedDataParallel)
    assert wrapped.device_ids is None
    before = model.weight.detach().clone()
    strategy.backward(wrapped(torch.ones(4, 3)).sum())
    assert model.weight.grad is not None
    strategy.step()
    assert not torch.equal(before, model.weight)
    strategy.zero_grad()
    assert model.weight.grad is None


def trained_linear(ctx: DistContext, size: int) -> tuple[Strategy, nn.Module, nn.Linear]:
    """A DDP-wrapped linear layer after one Adam step: strategy, wrapped and bare module."""
    model = nn.Linear(size, 2)
    config, two_ranks = TrainConfig(), dataclasses.replace(ctx, world_size=2)
    strategy = STRATEGIES["ddp"].factory(config, two_ranks, BatchLayout.of(config, 2))
    wrapped = strategy.wrap(model, lambda m: torch.optim.Adam(m.parameters(), lr=0.1))
    strategy.backward(wrapped(torch.ones(4, size)).sum())
    strategy.step()
    return strategy, wrapped, model


def test_save_and_load_restore_model_and_optimizer(ctx: DistContext, tmp_path: Path) -> None:
    saved, saved_wrapped, saved_model = trained_linear(ctx, 3)
    saved.save(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]
    loaded, loaded_wrapped, loaded_model = trained_linear(ctx, 3)
    loaded.load(tmp_path, 1)
    assert torch.equal(loaded_model.weight, saved_model.weight)
    # The next step is the saved run's: Adam's moments and step count came back too.
    for strategy, wrapped in ((saved, saved_wrapped), (loaded, loaded_wrapped)):
        strategy.zero_grad()
        strategy.backward(wrapped(torch.ones(4, 3)).sum())
        strategy.step()
    assert torch.equal(loaded_model.weight, saved_model.weight)


def test_loading_another_model_is_named(ctx: DistContext, tmp_path: Path) -> None:
    saved, _, _ = trained_linear(ctx, 3)
    saved.save(tmp_path)
    other, _, _ = trained_linear(ctx, 5)
    with pytest.raises(DdpimgError, match=rf"checkpoint {tmp_path}/model.pt does not fit this"):
        other.load(tmp_path, 1)


def test_fp16_saves_and_restores_the_loss_scale(ctx: DistContext, tmp_path: Path) -> None:
    model = nn.Linear(3, 2)
    config = TrainConfig(precision="fp16")
    strategy = STRATEGIES["ddp"].factory(config, ctx, BatchLayout.of(config, 1))
    wrapped = strategy.wrap(model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    before = model.weight.detach().clone()
    # Gradients that overflowed: the step is skipped and the scale halved.
    strategy.backward(wrapped(torch.ones(4, 3)).sum() * math.inf)
    strategy.step()
    assert torch.equal(model.weight, before)  # the step was skipped
    strategy.save(tmp_path)
    assert torch.load(tmp_path / "model.pt", weights_only=True)["scaler"]["scale"] == 2.0**15
    restored_model = nn.Linear(3, 2)
    restored = STRATEGIES["ddp"].factory(config, ctx, BatchLayout.of(config, 1))
    restored.wrap(restored_model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    restored.load(tmp_path, 1)
    assert isinstance(restored, DdpStrategy)
    assert restored.scaler.state_dict()["scale"] == 2.0**15


def rank_batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of ``rank``: different on every rank."""
    generator = torch.Generator().manual_seed(100 + rank)
    return torch.randn(4, 3, generator=generator), torch.randn(4, 2, generator=generator)


def seeded_linear() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(3, 2)


def gradients_on_rank(rank: int, out: str) -> None:
    """One of two gloo ranks: the strategy's backward on this rank's batch; the gradients
    it leaves are saved to ``out``/rank-N.pt."""
    ctx = dataclasses.replace(single_process(), rank=rank, world_size=2, local_rank=rank)
    model = seeded_linear()
    strategy = DdpStrategy(TrainConfig(), ctx)
    wrapped = strategy.wrap(model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    inputs, targets = rank_batch(rank)
    strategy.backward(nn.functional.mse_loss(wrapped(inputs), targets))
    grads = {name: p.grad for name, p in model.named_parameters()}
    torch.save(grads, Path(out) / f"rank-{rank}.pt")


def test_two_ranks_get_the_mean_of_their_gradients(tmp_path: Path) -> None:
    run_ranks(gradients_on_rank, 2, str(tmp_path))

    # Each rank's gradient on its own, computed here without any process group.
    per_rank = []
    for rank in range(2):
        model = seeded_linear()
        inputs, targets = rank_batch(rank)
        nn.functional.mse_loss(model(inputs), targets).backward()
        per_rank.append({name: p.grad for name, p in model.named_parameters()})
    for rank in range(2):
        got = torch.load(tmp_path / f"rank-{rank}.pt", weights_only=True)
        for name, grad in got.items():
            assert not torch.allclose(per_rank[0][name], per_rank[1][name])
            mean = (per_rank[0][name] + per_rank[1][name]) / 2
            torch.testing.assert_close(grad, mean)


def accumulated_on_rank(rank: int, out: str) -> None:
    """One of two gloo ranks: two micro-batches (this rank's batch cut in halves), their
    gradients saved after the first backward and after the last one."""
    ctx = dataclasses.replace(single_process(), rank=rank, world_size=2, local_rank=rank)
    model = seeded_linear()
    strategy = DdpStrategy(TrainConfig(), ctx)
    wrapped = strategy.wrap(model, lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    inputs, targets = rank_batch(rank)
    saved = []
    for half, last in ((slice(0, 2), False), (slice(2, 4), True)):
        with strategy.micro_batch(last=last):
            loss = nn.functional.mse_loss(wrapped(inputs[half]), targets[half]) / 2
            strategy.backward(loss)
        saved.append({name: p.grad.clone() for name, p in model.named_parameters()})
    torch.save(saved, Path(out) / f"rank-{rank}.pt")


def test_micro_batches_accumulate_locally_and_average_at_the_last(tmp_path: Path) -> None:
    """Before the last micro-batch a rank's gradient is its own (no all-reduce: DDP's
    no_sync); after it, every rank holds the mean over the ranks of the accumulated sums,
    which is the gradient of the mean loss over all samples."""
    run_ranks(accumulated_on_rank, 2, str(tmp_path))

    first_half, whole = [], []
    for rank in range(2):
        inputs, targets = rank_batch(rank)
        model = seeded_linear()
        (nn.functional.mse_loss(model(inputs[:2]), targets[:2]) / 2).backward()
        first_half.append({name: p.grad for name, p in model.named_parameters()})
        model = seeded_linear()
        nn.functional.mse_loss(model(inputs), targets).backward()
        whole.append({name: p.grad for name, p in model.named_parameters()})
    for rank in range(2):
        after_first, after_last = torch.load(tmp_path / f"rank-{rank}.pt", weights_only=True)
        for name, grad in after_first.items():
            torch.testing.assert_close(grad, first_half[rank][name])
        for name, grad in after_last.items():
            torch.testing.assert_close(grad, (whole[0][name] + whole[1][name]) / 2)
