from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from ddpimg.errors import DataError, DdpimgError
from ddpimg.runtime.context import DistContext
from ddpimg.train.batch import BatchLayout
from ddpimg.train.config import TrainConfig
from ddpimg.train.dropout import DropoutContext
from ddpimg.train.loop import Trainer
from ddpimg.train.outputs import RunRecorder
from ddpimg.train.progress import Progress
from ddpimg.train.sharding import TrainShard, epoch_order
from ddpimg.train.strategies.ddp import DdpStrategy
from ddpimg.train.tasks.gpt.data import synthetic_sequences
from ddpimg.train.tasks.gpt.task import GptTask, peak_bf16_flops
from tests.datagen import write_token_corpus
from tests.train.configs import trainer_config
from tests.train.contexts import single_process

CPU = single_process()


def tiny(tmp_path: Path, **overrides: object) -> TrainConfig:
    return trainer_config("gpt", **{"size": "tiny", "out": tmp_path} | overrides)


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


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    write_token_corpus(root, train_tokens=40_000, val_tokens=4_000, shard_tokens=15_000, vocab=300)
    return root


def test_shards_give_the_model_the_datas_vocabulary_padded_inside(
    tmp_path: Path, corpus: Path
) -> None:
    task = GptTask(tiny(tmp_path, data=str(corpus)), CPU)
    assert task.shape.vocab_size == task.vocabulary == 50257  # llm.c v1: GPT-2's
    assert task.shape.padded_vocab_size == 50304
    assert task.shape.n_layer == 2
    (tmp_path / "bytes").mkdir()
    for shard in corpus.glob("*.bin"):
        (tmp_path / "bytes" / shard.name).write_bytes(shard.read_bytes())
    (tmp_path / "bytes" / "tokenizer.json").write_text('{"tokenizer": "x", "vocabulary": 301}')
    task = GptTask(tiny(tmp_path, data=str(tmp_path / "bytes")), CPU)
    assert (task.shape.vocab_size, task.shape.padded_vocab_size) == (301, 320)
    model = task.build_model(DropoutContext(1))
    assert model.wte.weight.shape == (320, 64)
    assert model(torch.zeros(1, 3, dtype=torch.int64)).shape == (1, 3, 301)
    synthetic = GptTask(TrainConfig(trainer="gpt", out=tmp_path), CPU).shape
    assert (synthetic.vocab_size, synthetic.padded_vocab_size) == (50257, 50304)


def test_a_token_beyond_the_vocabulary_is_an_error(ctx: DistContext, tmp_path: Path) -> None:
    root = tmp_path / "data"
    write_token_corpus(root, train_tokens=3000, val_tokens=500, shard_tokens=3000, vocab=300)
    (root / "tokenizer.json").write_text('{"tokenizer": "small", "vocabulary": 200}')
    task = GptTask(tiny(tmp_path, data=str(root)), ctx)
    with pytest.raises(
        DataError, match=r"corpus_train_000000.bin holds token 29\d, beyond the data's vocabulary"
    ):
        task.datasets()


def test_shard_batches_are_the_windows_the_plan_names(
    ctx: DistContext, tmp_path: Path, corpus: Path
) -> None:
    task = GptTask(tiny(tmp_path, data=str(corpus), seq_len=16), ctx)
    train_set, eval_set = task.datasets()
    assert (len(train_set), len(eval_set)) == (2 * (14_999 // 16) + 9_999 // 16, 3_999 // 16)
    order = epoch_order(len(train_set), seed=1, epoch=1)
    whole = list(
        train_set.batches(TrainShard(len(train_set), BatchLayout(8, 1), 0).plan(order, 1, 2, 4))
    )
    halves = [
        list(
            train_set.batches(
                TrainShard(len(train_set), BatchLayout(4, 2), rank).plan(order, 1, 2, 4)
            )
        )
        for rank in range(2)
    ]
    for step, (inputs, targets) in enumerate(whole):
        assert inputs.shape == targets.shape == (8, 16)
        assert torch.equal(inputs[:, 1:], targets[:, :-1])
        joined = torch.cat([halves[0][step][0], halves[1][step][0]])
        assert torch.equal(inputs, joined)
    reader = train_set.reader  # type: ignore[attr-defined]
    first_rows = order[16:24].numpy()
    assert torch.equal(whole[0][0], torch.from_numpy(reader.read(first_rows))[:, :-1])
    facts = task.data_facts()
    assert (facts["format"], facts["train_tokens"], facts["eval_tokens"]) == (
        "llm.c v1",
        40_000,
        4_000,
    )
    assert facts["model"]["vocab_size"] == facts["vocabulary"] == 50257


def test_shard_sample_limits(ctx: DistContext, tmp_path: Path, corpus: Path) -> None:
    task = GptTask(
        tiny(tmp_path, data=str(corpus), seq_len=32, train_samples=50, eval_samples=7), ctx
    )
    train_set, eval_set = task.datasets()
    assert (len(train_set), len(eval_set)) == (50, 7)
    with pytest.raises(DataError, match=r"--eval-samples 200 is more than the 124 evaluation"):
        GptTask(tiny(tmp_path, data=str(corpus), seq_len=32, eval_samples=200), ctx).datasets()


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


@pytest.mark.parametrize("data", ["synthetic", "shards"])
def test_training_lowers_the_loss(
    ctx: DistContext, make_config: Callable[..., TrainConfig], corpus: Path, data: str
) -> None:
    source = "synthetic" if data == "synthetic" else str(corpus)
    config = make_config(
        trainer="gpt", size="tiny", train_samples=256, max_steps=12, seq_len=32, data=source
    )
    recorder = RunRecorder(config.out, {}, Progress(io.StringIO(), interactive=False))
    batch = BatchLayout.of(config, ctx.world_size)
    summary = Trainer(
        config, ctx, GptTask(config, ctx), DdpStrategy(config, ctx), recorder, batch=batch
    ).run()
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
    """The ranks' averaged gradients are one process's on the global batch: they differ by at
    most 4.5e-8 (AVX2 kernels and ATEN_CPU_CAPABILITY=default, 2026-11-26), at most 1.6% of
    the tolerance (rtol 1e-4, atol 1e-6)."""
    task = GptTask(tiny(tmp_path, train_samples=64, seq_len=16), CPU)
    train_set, _ = task.datasets()
    order = epoch_order(len(train_set), seed=1, epoch=1)
    torch.manual_seed(1)
    model = task.build_model(DropoutContext(1))

    def gradients(per_rank: int, rank: int, world: int) -> list[torch.Tensor]:
        model.zero_grad()
        inputs, targets = train_set.batch(
            TrainShard(64, BatchLayout(per_rank, world), rank).rows(order, 1)
        )
        torch.autograd.backward(task.loss(model(inputs), targets).mean())
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    single = gradients(16, 0, 1)
    ranks = [gradients(16 // world_size, rank, world_size) for rank in range(world_size)]
    for index, expected in enumerate(single):
        averaged = torch.stack([grads[index] for grads in ranks]).mean(dim=0)
        assert torch.allclose(averaged, expected, rtol=1e-4, atol=1e-6)
