from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ddpimg.errors import DataError
from ddpimg.train.batch import BatchLayout
from ddpimg.train.config import TrainConfig
from ddpimg.train.dropout import DropoutContext
from ddpimg.train.tasks import TRAINERS
from ddpimg.train.tasks.toy.task import ToyModel, ToyTask, tail_device
from tests.train.contexts import single_process

CPU = single_process()


def toy(tmp_path: Path, **overrides: object) -> TrainConfig:
    fields: dict[str, object] = {"trainer": "toy", "out": tmp_path} | overrides
    return TrainConfig(**fields)  # type: ignore[arg-type]


def test_rows_are_the_tutorials(tmp_path: Path) -> None:
    config = toy(tmp_path)
    train_set, eval_set = TRAINERS["toy"].factory(config, CPU, BatchLayout.of(config, 1)).datasets()
    assert (len(train_set), len(eval_set)) == (2**20, 2**14)
    inputs, labels = train_set.batch(torch.tensor([0, 7, 1_048_575]))
    assert inputs.shape == (3, 32)
    assert inputs[:, 0].tolist() == [0.0, 7.0, 1_048_575.0]
    assert torch.equal(inputs, inputs[:, :1].expand(-1, 32))
    assert labels.tolist() == [0, 7, 5]


def test_sample_limits(tmp_path: Path) -> None:
    train_set, eval_set = ToyTask(toy(tmp_path, train_samples=100, eval_samples=10), CPU).datasets()
    assert (len(train_set), len(eval_set)) == (100, 10)
    with pytest.raises(DataError, match=r"--train-samples 1048577 is more than the 1048576"):
        ToyTask(toy(tmp_path, train_samples=2**20 + 1), CPU).datasets()


def test_model_is_a_head_and_a_tail(tmp_path: Path) -> None:
    model = ToyTask(toy(tmp_path), CPU).build_model(DropoutContext(1))
    assert isinstance(model, ToyModel)
    assert (model.head.in_features, model.head.out_features) == (32, 32)
    assert (model.tail.in_features, model.tail.out_features) == (32, 10)
    assert {p.device for p in model.parameters()} == {CPU.device}
    assert model(torch.ones(4, 32)).shape == (4, 10)


@pytest.mark.parametrize(
    ("head", "gpus", "tail"),
    [
        (torch.device("cpu"), 2, torch.device("cpu")),
        (torch.device("cuda", 0), 2, torch.device("cuda", 1)),
        (torch.device("cuda", 2), 2, torch.device("cuda", 3)),
        (torch.device("cuda", 3), 1, torch.device("cuda", 3)),
    ],
)
def test_tail_runs_on_the_replicas_next_gpu(
    head: torch.device, gpus: int, tail: torch.device
) -> None:
    assert tail_device(head, gpus) == tail


def test_optimizer_and_loss_are_the_tutorials(tmp_path: Path) -> None:
    task = ToyTask(toy(tmp_path), CPU)
    optimizer = task.make_optimizer(task.build_model(DropoutContext(1)))
    assert isinstance(optimizer, torch.optim.Adam)
    assert optimizer.param_groups[0]["lr"] == 1e-4
    logits = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    assert task.loss(logits, torch.tensor([0, 0])).tolist() == pytest.approx([0.6931472, 0.126928])
    assert task.correct(logits, torch.tensor([1, 0])).item() == 1
    assert task.throughput(100.0, 2) == {}
