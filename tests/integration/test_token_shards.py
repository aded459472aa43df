"""``train gpt --data DIR`` on token shards made by ``ddpimg data tokenize`` (llm.c's
format) and on the same tokens in nanoGPT's headerless ``train.bin`` / ``val.bin``, under
real launchers: two ranks stopped mid-epoch and resumed follow one process's trajectory
(``srun -n 2`` on the shards, ``mpirun -np 2`` on nanoGPT's files: within tolerance, their
sums ordered differently), and one process stopped and resumed is the uninterrupted run
(bitwise, with ``--deterministic``). Which rows a rank reads does not depend on the launcher
(the ranks come resolved: ddpimg.topology), so two workers of torch's launcher on the shards
(run here until 2026-11-27, within the tolerance like these) are not run a third time. The
12 steps cross an epoch boundary (8 steps an epoch), so the order of the second epoch is
drawn too, and each epoch's evaluation covers the first 11 of the 12 evaluation windows
once (6 and 5 with two ranks).

Tolerance (python -m tests.noise -- TRAIN --data SHARDS, AMD EPYC, 2026-11-25): 1 thread,
torch's default kernels, oneDNN at SSE4.1 and MKL's compatible path parted from one process
by at most 1.3e-8 at steps 1-2, under one float32 step: the floor is that step, 1.2e-7.
Over the 12 steps they and 2 ranks parted by at most 2.7e-8 (0.23x the floor); the
tolerance is 10x the floor."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ddpimg.data.tokenshards import HEADER_BYTES
from tests.integration.runs import (
    command,
    read_metrics,
    run,
    run_info,
    summary,
    train_losses,
)
from tests.noise import FLOAT32_STEP, Tolerance, assert_within

WORDS = ("tokens", "shard", "window", "epoch", "rank", "seed", "step", "batch", "the", "a")
TRAIN = [
    "gpt", "--size", "tiny", "--seq-len", "32", "--global-batch-size", "16", "--epochs", "2",
    "--max-steps", "12", "--log-every", "1", "--seed", "5", "--deterministic",
    "--eval-samples", "11",
]  # fmt: skip
TOLERANCE = Tolerance(floor=FLOAT32_STEP, multiple=10, steps=12)  # the docstring
EVAL_SAMPLES = 11  # odd: 6 and 5 with two ranks


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


@pytest.fixture(scope="module")
def nanogpt(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Path:
    """The corpus's tokens as nanoGPT's prepare.py writes them: one headerless uint16 file
    a split, named as nanoGPT names them, with tokenize's vocabulary record beside them."""
    root = tmp_path_factory.mktemp("nanogpt")
    for split in ("train", "val"):
        (shard,) = corpus.glob(f"corpus_{split}_*.bin")
        (root / f"{split}.bin").write_bytes(shard.read_bytes()[HEADER_BYTES:])
    (root / "tokenizer.json").write_bytes((corpus / "tokenizer.json").read_bytes())
    return root


def check(out: Path, world_size: int, data_format: str) -> None:
    """A completed run of TRAIN's length that evaluated every evaluation window once."""
    totals = summary(out)
    assert (totals["world_size"], totals["steps"], totals["epochs"]) == (world_size, 12, 2)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["data"]["format"] == data_format
    assert manifest["data"]["eval_samples"] == EVAL_SAMPLES
    evaluations = [m["samples"] for m in read_metrics(out) if m["kind"] == "eval"]
    assert evaluations == [EVAL_SAMPLES, EVAL_SAMPLES]


def train(data: Path, out: Path, *extra: str) -> list[str]:
    return [command("train"), *TRAIN, "--data", str(data), "--out", str(out), *extra]


@pytest.fixture(scope="module")
def one_process(
    tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str], corpus: Path
) -> list[float]:
    out = tmp_path_factory.mktemp("one")
    run(train(corpus, out), run_env)
    check(out, 1, "llm.c v1")
    assert summary(out)["steps_per_epoch"] == 8
    manifest = json.loads((out / "manifest.json").read_text())
    # Bytes + end-of-text, unpadded: the padding to 320 is the model's own.
    assert manifest["data"]["model"]["vocab_size"] == manifest["data"]["vocabulary"] == 257
    losses = train_losses(out)
    assert losses[-1] < losses[0] - 0.5, losses
    return losses


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
    check(tmp_path, 2, "llm.c v1")
    assert_within(train_losses(tmp_path), one_process, TOLERANCE, "shards, srun -n 2 resumed vs 1")


@pytest.mark.mpi
def test_mpirun_ranks_on_nanogpt_files_stop_resume_and_follow_one_process(
    tmp_path: Path, run_env: dict[str, str], nanogpt: Path, one_process: list[float]
) -> None:
    # The same windows as the llm.c shards (their header aside): the same trajectory.
    run(["mpirun", "-np", "2", *train(nanogpt, tmp_path, "--max-steps", "5")], run_env)
    run(["mpirun", "-np", "2", *train(nanogpt, tmp_path)], run_env)
    assert run_info(tmp_path)["source"] == "openmpi"
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["resumed_from"]["step"] == 5
    assert str(nanogpt / "tokenizer.json") in manifest["data"]["vocabulary_from"]
    check(tmp_path, 2, "nanoGPT")
    assert_within(
        train_losses(tmp_path), one_process, TOLERANCE, "nanoGPT, mpirun -np 2 resumed vs 1"
    )


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
