from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from ddpimg.train.batch import BatchLayout
from ddpimg.train.config import TrainConfig
from ddpimg.train.dropout import BatchPosition, DropoutContext, GlobalBatchDropout
from ddpimg.train.sharding import TrainShard, epoch_order
from ddpimg.train.tasks import TRAINERS, epoch_schedule
from ddpimg.train.tasks.mnist.task import MnistNet, MnistTask
from tests.train.contexts import single_process

CPU = single_process()


def test_model_is_the_tutorials() -> None:
    model = MnistNet(DropoutContext(1))
    # pytorch/examples mnist/main.py Net: 320 + 18,496 + 1,179,776 + 1,290 parameters.
    assert sum(p.numel() for p in model.parameters()) == 1_199_882
    dropouts = [m for m in model.modules() if isinstance(m, GlobalBatchDropout)]
    assert [(d.p, d.layer) for d in dropouts] == [(0.25, 1), (0.5, 2)]
    assert not any(isinstance(m, nn.Dropout) for m in model.modules())


def test_model_outputs_log_probabilities() -> None:
    context = DropoutContext(1)
    model = MnistNet(context)
    context.position = BatchPosition(step=1, offset=0, global_batch=3)
    output = model(torch.randn(3, 1, 28, 28))
    assert output.shape == (3, 10)
    assert output.exp().sum(dim=1).tolist() == pytest.approx([1.0, 1.0, 1.0])


def test_optimizer_and_schedule_are_the_tutorials(tmp_path: Path) -> None:
    task = MnistTask(TrainConfig(lr=0.8, gamma=0.5, out=tmp_path), CPU)
    optimizer = task.make_optimizer(MnistNet(DropoutContext(1)))
    assert isinstance(optimizer, torch.optim.Adadelta)
    scheduler = epoch_schedule(task.config, optimizer)
    for _ in range(2):
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.2)
    assert task.eval_batch_size == 1000


def test_loss_is_per_sample_nll() -> None:
    task = MnistTask(TrainConfig(), CPU)
    output = torch.log(torch.tensor([[0.5, 0.5] + [0.0] * 8, [0.25, 0.75] + [0.0] * 8]))
    target = torch.tensor([1, 1])
    assert task.loss(output, target).tolist() == pytest.approx([0.6931472, 0.2876821])
    assert task.correct(output, target).item() == 1


def test_load_respects_sample_limits(tmp_path: Path) -> None:
    config = TrainConfig(train_samples=30, eval_samples=20, out=tmp_path)
    task = TRAINERS["mnist"].factory(config, CPU, BatchLayout.of(config, 1))
    train_set, eval_set = task.datasets()
    assert (len(train_set), len(eval_set)) == (30, 20)
    inputs, targets = train_set.batch(torch.tensor([0, 29]))
    assert inputs.shape == (2, 1, 28, 28)
    assert inputs.dtype == torch.float32
    assert targets.dtype == torch.int64


@pytest.mark.parametrize("world_size", [2, 4])
def test_rank_gradients_average_to_the_global_batch_gradient(
    world_size: int, tmp_path: Path
) -> None:
    """What DDP computes from per-rank slices equals one process on the global batch, dropout
    included: the core of topology invariance. The averaged gradients differ from the one
    process's by at most 7.1e-8 (AVX2 kernels and ATEN_CPU_CAPABILITY=default, 2026-12-07):
    at most 2.3% of the tolerance (rtol 1e-4, atol 1e-6); another batch's rows change them by
    percents."""
    config = TrainConfig(train_samples=64, eval_samples=1, out=tmp_path)
    task = MnistTask(config, CPU)
    train_set, _ = task.datasets()
    order = epoch_order(len(train_set), seed=1, epoch=1)
    context = DropoutContext(seed=1)
    torch.manual_seed(1)
    model = task.build_model(context)

    def gradients(per_rank: int, rank: int, world: int) -> list[torch.Tensor]:
        model.zero_grad()
        shard = TrainShard(len(train_set), BatchLayout(per_rank, world), rank)
        inputs, targets = train_set.batch(shard.rows(order, 1))
        context.position = BatchPosition(step=2, offset=shard.offset, global_batch=16)
        torch.autograd.backward(task.loss(model(inputs), targets).mean())
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    single = gradients(16, 0, 1)
    ranks = [gradients(16 // world_size, rank, world_size) for rank in range(world_size)]
    for index, expected in enumerate(single):
        averaged = torch.stack([grads[index] for grads in ranks]).mean(dim=0)
        assert torch.allclose(averaged, expected, rtol=1e-4, atol=1e-6)
