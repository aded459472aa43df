"""Every bundled trainer under every strategy with two ranks, and the topology invariance of
``gpt --size tiny``.

Each cell runs ``train TRAINER --nproc-per-node 2`` on a configuration small enough for a
two-core machine (tiny models, 32-pixel images, a few steps) and checks that the loss goes
down, evaluation ran and the run completed. Every trainer runs under DDP, FSDP and
DeepSpeed; every ZeRO stage runs at least once: all three with gpt (the cheapest), one
each with the other trainers (the launches, not the steps, cost the time: about half a
minute each on two cores). The gpt cells run 20 steps, so the same runs also give the
acceptance comparisons: 2 processes, and 2 srun tasks, against one process (1e-4
relative), and DeepSpeed ZeRO-2 against DDP (1e-3 relative). FSDP2 runs on the CPU with
Gloo, so its cells need no GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.runs import assert_close, command, read_metrics, run, summary, train_losses

COMMON = ["--epochs", "1", "--log-every", "1", "--warmup-steps", "2", "--seed", "3"]
TRAINERS = {
    "mnist": [
        "--global-batch-size", "32", "--train-samples", "512", "--eval-samples", "64",
        "--max-steps", "5",
    ],
    "toy": [
        "--global-batch-size", "32", "--train-samples", "4096", "--eval-samples", "256",
        "--max-steps", "10",
    ],
    "resnet": [
        "--arch", "resnet18", "--image-size", "32", "--global-batch-size", "16",
        "--train-samples", "256", "--eval-samples", "32", "--max-steps", "5",
    ],
    "gpt": [
        "--size", "tiny", "--seq-len", "32", "--global-batch-size", "16",
        "--train-samples", "512", "--eval-samples", "32", "--max-steps", "20",
    ],
}  # fmt: skip
STRATEGIES = {
    "ddp": ["--strategy", "ddp"],
    "zero1": ["--strategy", "deepspeed", "--zero-stage", "1"],
    "zero2": ["--strategy", "deepspeed", "--zero-stage", "2"],
    "zero3": ["--strategy", "deepspeed", "--zero-stage", "3"],
    "fsdp": ["--strategy", "fsdp"],
}
ZERO_STAGES = {
    "mnist": ["zero1"],
    "toy": ["zero2"],
    "resnet": ["zero3"],
    "gpt": ["zero1", "zero2", "zero3"],
}
# What the summary reports on top of samples/s, per trainer.
THROUGHPUT = {"mnist": set(), "toy": set(), "resnet": {"images_per_s"}, "gpt": {"tokens_per_s"}}
INVARIANCE_REL = 1e-4
ZERO_REL = 1e-3


def arguments(trainer: str, strategy: str) -> list[str]:
    return [trainer, *TRAINERS[trainer], *COMMON, *STRATEGIES[strategy]]


class TwoRankRuns:
    """Each (trainer, strategy) cell run once per session, on first use."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.outs: dict[tuple[str, str], Path] = {}

    def out(self, trainer: str, strategy: str) -> Path:
        key = (trainer, strategy)
        if key not in self.outs:
            out = self.root / f"{trainer}-{strategy}"
            cmd = [command("train"), *arguments(trainer, strategy), "--nproc-per-node", "2"]
            run([*cmd, "--out", str(out)], self.env, timeout=600)
            self.outs[key] = out
        return self.outs[key]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str]) -> TwoRankRuns:
    return TwoRankRuns(tmp_path_factory.mktemp("two-ranks"), run_env)


def cells() -> list[object]:
    params = []
    for trainer in TRAINERS:
        for strategy in ["ddp", "fsdp", *ZERO_STAGES[trainer]]:
            marks = [pytest.mark.torchrun]
            if strategy.startswith("zero"):
                marks.append(pytest.mark.deepspeed)
            params.append(pytest.param(trainer, strategy, marks=marks, id=f"{trainer}-{strategy}"))
    return params


@pytest.mark.parametrize(("trainer", "strategy"), cells())
def test_two_ranks_lower_the_loss(two_ranks: TwoRankRuns, trainer: str, strategy: str) -> None:
    out = two_ranks.out(trainer, strategy)
    losses = train_losses(out)
    steps = int(TRAINERS[trainer][TRAINERS[trainer].index("--max-steps") + 1])
    assert len(losses) == steps
    # Small batches are noisy step to step: compare the first and last two steps.
    assert sum(losses[-2:]) < sum(losses[:2]), f"{trainer} {strategy}: {losses}"
    evaluations = [m for m in read_metrics(out) if m["kind"] == "eval"]
    assert len(evaluations) == 1
    assert 0 <= evaluations[0]["accuracy"] <= 1
    totals = summary(out)
    assert (totals["world_size"], totals["steps"]) == (2, steps)
    assert THROUGHPUT[trainer] <= set(totals)
    assert all(totals[key] > 0 for key in THROUGHPUT[trainer])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["arguments"]["strategy"] == STRATEGIES[strategy][1]


@pytest.fixture(scope="module")
def gpt_one_process(
    tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str]
) -> list[float]:
    out = tmp_path_factory.mktemp("gpt-single")
    run([command("train"), *arguments("gpt", "ddp"), "--out", str(out)], run_env)
    assert summary(out)["world_size"] == 1
    return train_losses(out)


@pytest.mark.torchrun
def test_gpt_two_processes_match_one(two_ranks: TwoRankRuns, gpt_one_process: list[float]) -> None:
    losses = train_losses(two_ranks.out("gpt", "ddp"))
    assert_close(losses, gpt_one_process, INVARIANCE_REL, "gpt, 2 processes vs 1")


@pytest.mark.slurm
def test_gpt_two_srun_tasks_match_one_process(
    tmp_path: Path, slurm_env: dict[str, str], gpt_one_process: list[float]
) -> None:
    cmd = ["srun", "-n", "2", command("train"), *arguments("gpt", "ddp"), "--out", str(tmp_path)]
    run(cmd, slurm_env, timeout=600)
    assert summary(tmp_path)["world_size"] == 2
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["run_info"]["source"] == "slurm"
    assert_close(train_losses(tmp_path), gpt_one_process, INVARIANCE_REL, "gpt, srun -n 2 vs 1")


@pytest.mark.torchrun
@pytest.mark.deepspeed
def test_zero2_follows_ddp_for_20_steps(two_ranks: TwoRankRuns) -> None:
    ddp = train_losses(two_ranks.out("gpt", "ddp"))
    zero2 = train_losses(two_ranks.out("gpt", "zero2"))
    assert len(ddp) == 20
    assert_close(zero2, ddp, ZERO_REL, "gpt, DeepSpeed ZeRO-2 vs DDP")
