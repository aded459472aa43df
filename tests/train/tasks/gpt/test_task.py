from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from ddpimg.errors import DataError, DdpimgError
from ddpimg.runtime.context import DistContext
from ddpimg.train.config import TrainConfig
from ddpimg.train.dropout import DropoutContext
from ddpimg.train.loop import train
from ddpimg.train.outputs import RunRecorder
from ddpimg.train.progress import Progress
from ddpimg.train.sharding import TrainShard, epoch_order
from ddpimg.train.strategies.ddp import DdpStrategy
from ddpimg.train.tasks import TRAINERS
from ddpimg.train.tasks.gpt.data import read_text_bytes, synthetic_sequences, windows
from ddpimg.train.tasks.gpt.task import GptTask, peak_bf16_flops
from tests.train.contexts import single_process

CPU = single_process()


def tiny(tmp_path: Path, **overrides: object) -> TrainConfig:
    fields: dict[str, object] = {"trainer": "gpt", "size": "tiny", "out": tmp_path} | overrides
    return TrainConfig(**fields)  # type: ignore[arg-type]


def test_synthetic_sequences_are_fixed_and_prefix_stable() -> None:
    first = synthetic_sequences(0, 300, 16, 256)
    assert first.shape == (300, 17)
    assert first.dtype == torch.int64
    assert torch.equal(first, synthetic_sequences(0, 300, 16, 256))
    assert torch.equal(first[:10], synthetic_sequences(0, 10, 16, 256))
    assert not torch.equal(first[:10], synthetic_sequences(1, 10, 16, 256))
    assert int(first.min()) >= 0
    assert int(first.max()) < 256


def test_synthetic_sequences_walk_a_chain_of_four_successors() -> None:
    sequences = synthetic_sequences(0, 2000, 32, 64)
    pairs = torch.stack([sequences[:, :-1].flatten(), sequences[:, 1:].flatten()], dim=1)
    successors: dict[int, set[int]] = {}
    for current, following in pairs.unique(dim=0).tolist():
        successors.setdefault(current, set()).add(following)
    assert max(len(s) for s in successors.values()) <= 4
    # Zipf-like: the most frequent token is far above the uniform 1/64.
    counts = torch.bincount(sequences.flatten(), minlength=64).double()
    assert float(counts.max() / counts.sum()) > 3 / 64


def test_windows_overlap_by_the_last_target() -> None:
    tokens = torch.arange(10)
    assert windows(tokens, 3).tolist() == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    assert windows(tokens[:3], 3).shape == (0, 4)


def test_text_file_is_read_as_bytes(tmp_path: Path) -> None:
    path = tmp_path / "text.txt"
    path.write_text("héllo", encoding="utf-8")
    assert read_text_bytes(path).tolist() == list("héllo".encode())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b"ok \xff\xfe",
            r"--data .*text.txt: not UTF-8 text: byte 3 is 0xff \(invalid start byte\)",
        ),
        (None, r"--data .*text.txt does not exist\n  hint: give a UTF-8 text file for gpt"),
    ],
)
def test_unreadable_text_is_named(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "text.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DataError, match=message):
        read_text_bytes(path)


def test_text_file_splits_off_its_last_tenth(tmp_path: Path) -> None:
    path = tmp_path / "text.txt"
    path.write_bytes(bytes(32 + i % 89 for i in range(1000)))
    task = TRAINERS["gpt"].factory(tiny(tmp_path, data=str(path), seq_len=8), CPU)
    train_set, eval_set = task.datasets()
    # The last 100 bytes held out -> 12 windows of 9 bytes; 900 bytes -> 112 windows.
    assert (len(train_set), len(eval_set)) == (112, 12)
    inputs, targets = train_set.batch(torch.tensor([0, 1]))
    assert inputs.shape == targets.shape == (2, 8)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    assert inputs[:, 0].tolist() == [32, 32 + 8]
    assert eval_set.batch(slice(0, 1))[0][0, 0].item() == 32 + 900 % 89


def test_short_text_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "text.txt"
    path.write_text("short")
    task = TRAINERS["gpt"].factory(tiny(tmp_path, data=str(path), seq_len=8), CPU)
    with pytest.raises(DataError, match=r"5 bytes leave no training sample of --seq-len 8 \+ 1"):
        task.datasets()


def test_text_data_uses_the_byte_vocabulary(tmp_path: Path) -> None:
    task = GptTask(TrainConfig(trainer="gpt", data=str(tmp_path / "a.txt"), out=tmp_path), CPU)
    assert task.shape.vocab_size == 256
    assert task.shape.n_layer == 12
    assert GptTask(TrainConfig(trainer="gpt", out=tmp_path), CPU).shape.vocab_size == 50304


def test_seq_len_beyond_the_context_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DdpimgError, match=r"--seq-len 65 is longer than the context of --size "):
        GptTask(tiny(tmp_path, seq_len=65), CPU)


def test_sample_limits(tmp_path: Path) -> None:
    task = GptTask(tiny(tmp_path, train_samples=20, eval_samples=3, seq_len=16), CPU)
    train_set, eval_set = task.datasets()
    assert (len(train_set), len(eval_set)) == (20, 3)
    with pytest.raises(DataError, match=r"--eval-samples 501 is more than the 500 evaluation"):
        GptTask(tiny(tmp_path, eval_samples=501), CPU).datasets()


def test_loss_is_the_mean_over_a_samples_tokens(tmp_path: Path) -> None:
    task = GptTask(tiny(tmp_path), CPU)
    logits = torch.log(torch.tensor([[[0.5, 0.5], [0.9, 0.1]], [[0.2, 0.8], [0.2, 0.8]]]))
    target = torch.tensor([[0, 0], [1, 0]])
    expected = [(0.6931472 + 0.1053605) / 2, (0.2231436 + 1.6094379) / 2]
    assert task.loss(logits, target).tolist() == pytest.approx(expected)
    # Three of four tokens right: sample 0 both, sample 1 one of two.
    assert task.correct(logits, target).item() == pytest.approx(1.5)


def test_adamw_decays_matrices_only(tmp_path: Path) -> None:
    task = GptTask(tiny(tmp_path), CPU)
    model = task.build_model(DropoutContext(1))
    optimizer = task.make_optimizer(model)
    assert isinstance(optimizer, torch.optim.AdamW)
    decay, no_decay = optimizer.param_groups
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.1, 0.0)
    assert all(p.dim() == 2 for p in decay["params"])
    assert all(p.dim() == 1 for p in no_decay["params"])
    assert decay["betas"] == (0.9, 0.95)
    assert decay["lr"] == 1e-3


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA A100-SXM4-40GB", 312e12),
        ("Tesla V100-SXM2-32GB", 125e12),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_peak_flops_table(name: str, peak: float | None) -> None:
    assert peak_bf16_flops(name) == peak


def test_throughput_counts_tokens_and_no_mfu_on_the_cpu(tmp_path: Path) -> None:
    task = GptTask(tiny(tmp_path, seq_len=32), CPU)
    task.build_model(DropoutContext(1))
    assert task.throughput(10.0, 2) == {"tokens_per_s": 320.0}


def test_training_lowers_the_loss(
    ctx: DistContext, make_config: Callable[..., TrainConfig]
) -> None:
    config = make_config(trainer="gpt", size="tiny", train_samples=256, max_steps=12, seq_len=32)
    recorder = RunRecorder(config.out, {}, Progress(io.StringIO(), interactive=False))
    summary = train(config, ctx, GptTask(config, ctx), DdpStrategy(config, ctx), recorder)
    recorder.finish("completed", 0)
    lines = [json.loads(line) for line in (config.out / "metrics.jsonl").read_text().splitlines()]
    losses = [line["loss"] for line in lines if line["kind"] == "train"]
    assert losses[-1] < losses[0] - 0.3, losses
    assert all(line["tokens_per_s"] > 0 for line in lines if line["kind"] == "train")
    assert summary.eval_accuracy > 0
    # The summary's rates count the steps after --warmup-steps (10 by default) only.
    assert summary.steady_samples_per_s is not None
    assert summary.to_json()["tokens_per_s"] == summary.steady_samples_per_s * 32


@pytest.mark.parametrize("world_size", [2, 4])
def test_rank_gradients_average_to_the_global_batch_gradient(
    world_size: int, tmp_path: Path
) -> None:
    task = GptTask(tiny(tmp_path, train_samples=64, seq_len=16), CPU)
    train_set, _ = task.datasets()
    order = epoch_order(len(train_set), seed=1, epoch=1)
    torch.manual_seed(1)
    model = task.build_model(DropoutContext(1))

    def gradients(per_rank: int, rank: int, world: int) -> list[torch.Tensor]:
        model.zero_grad()
        inputs, targets = train_set.batch(TrainShard(64, per_rank, rank, world).rows(order, 1))
        torch.autograd.backward(task.loss(model(inputs), targets).mean())
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    single = gradients(16, 0, 1)
    ranks = [gradients(16 // world_size, rank, world_size) for rank in range(world_size)]
    for index, expected in enumerate(single):
        averaged = torch.stack([grads[index] for grads in ranks]).mean(dim=0)
        assert torch.allclose(averaged, expected, rtol=1e-4, atol=1e-6)
