"""``train gpt --data DIR`` on token shards made by ``ddpimg data tokenize``, under real
launchers: two processes follow one process's trajectory (torchrun's workers and ``srun -n
2``), and a run stopped mid-epoch and resumed is the uninterrupted run (bitwise with one
process and ``--deterministic``; within tolerance with two srun tasks, whose sums are
ordered differently). The 12 steps cross an epoch boundary (8 steps an epoch), so the order
of the second epoch is drawn too."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.integration.runs import assert_close, command, run, summary, train_losses

WORDS = ("tokens", "shard", "window", "epoch", "rank", "seed", "step", "batch", "the", "a")
TRAIN = [
    "gpt", "--size", "tiny", "--seq-len", "32", "--global-batch-size", "16", "--epochs", "2",
    "--max-steps", "12", "--log-every", "1", "--seed", "5", "--deterministic",
]  # fmt: skip
REL = 1e-4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str]) -> Path:
    """About 4,500 training and 400 evaluation byte tokens: 8 steps of 16 windows an epoch."""
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    text = root / "text"
    text.mkdir()
    for index in range(76):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16)))
        (text / f"{index:03d}.txt").write_text(words + ".\n")
    data = root / "shards"
    run([command("ddpimg"), "data", "tokenize", str(text), str(data), "--tokenizer", "bytes",
         "--val-every", "11", "--workers", "2"], run_env)  # fmt: skip
    return data


def train(data: Path, out: Path, *extra: str) -> list[str]:
    return [command("train"), *TRAIN, "--data", str(data), "--out", str(out), *extra]


@pytest.fixture(scope="module")
def one_process(
    tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str], corpus: Path
) -> list[float]:
    out = tmp_path_factory.mktemp("one")
    run(train(corpus, out), run_env)
    totals = summary(out)
    assert (totals["steps"], totals["epochs"], totals["steps_per_epoch"]) == (12, 2, 8)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["data"]["format"] == "llm.c v1"
    assert manifest["data"]["model"]["vocab_size"] == 320  # bytes + end-of-text, padded
    losses = train_losses(out)
    assert losses[-1] < losses[0] - 0.5, losses
    return losses


@pytest.mark.torchrun
def test_two_workers_follow_one_process(
    tmp_path: Path, run_env: dict[str, str], corpus: Path, one_process: list[float]
) -> None:
    run(train(corpus, tmp_path, "--nproc-per-node", "2"), run_env)
    assert summary(tmp_path)["world_size"] == 2
    assert_close(train_losses(tmp_path), one_process, REL, "shards, 2 workers vs 1 process")


@pytest.mark.torchrun
def test_resumed_mid_epoch_is_the_uninterrupted_run(
    tmp_path: Path, run_env: dict[str, str], corpus: Path, one_process: list[float]
) -> None:
    run(train(corpus, tmp_path, "--max-steps", "5"), run_env)
    assert len(train_losses(tmp_path)) == 5
    resumed = run(train(corpus, tmp_path), run_env)
    assert "resuming from" in resumed.stderr
    assert train_losses(tmp_path) == one_process  # bitwise


@pytest.mark.slurm
def test_srun_tasks_stop_resume_and_follow_one_process(
    tmp_path: Path, slurm_env: dict[str, str], corpus: Path, one_process: list[float]
) -> None:
    run(["srun", "-n", "2", *train(corpus, tmp_path, "--max-steps", "5")], slurm_env)
    run(["srun", "-n", "2", *train(corpus, tmp_path)], slurm_env)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["run_info"]["source"] == "slurm"
    assert manifest["resumed_from"]["step"] == 5
    assert summary(tmp_path)["world_size"] == 2
    assert_close(train_losses(tmp_path), one_process, REL, "shards, srun -n 2 resumed vs 1")


@pytest.mark.torchrun
def test_a_token_beyond_the_vocabulary_stops_every_rank(
    tmp_path: Path, run_env: dict[str, str], corpus: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for shard in corpus.glob("*.bin"):
        (data / shard.name).write_bytes(shard.read_bytes())
    (data / "tokenizer.json").write_text('{"tokenizer": "too small", "vocabulary": 100}')
    failed = run(train(data, tmp_path / "out", "--nproc-per-node", "2"), run_env, check=False)
    assert failed.returncode == 2
    assert "corpus_train_000000.bin holds token 256, beyond the data's vocabulary" in failed.stderr
