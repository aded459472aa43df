"""A run checkpointed on two ranks continues on one, as a job that lost a node does: for
every trainer and every strategy that reshards (DDP, FSDP), the losses after the resume
are those of one process that never stopped. (DeepSpeed cannot reshard: resuming its
checkpoint at another world size is an error that says so, tests/train/checkpoint.)

All cells run in two spawned processes (a 2-rank gloo group, then a 1-rank one), each
training every cell in turn: two interpreter starts for the lot instead of three per cell.

Tolerance (tests/noise.py): the point here is the data order and the state carried across
the resume, not the arithmetic. Two ranks and one process sum in another order, and resnet18
from scratch amplifies that difference about 30x a step (in float32 on an AMD EPYC, 2 ranks
parted from 1 process by 2e-7, 1e-6, 4e-6, 3e-4, 8e-3 over steps 1-5): its cells train in
float64 (torch's default dtype, in both processes), where the same growth stays far below
any real difference. The other trainers amplify it little and run in float32 (mnist and toy
feed float32 data, which a float64 model refuses). TOLERANCES gives each trainer's
measured floor and multiple.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from ddpimg.cli import build_parser
from ddpimg.cli.train_options import train_config
from ddpimg.runtime.context import DistContext
from ddpimg.runtime.device import rank_cpu_share
from ddpimg.train import run_training
from tests.integration.runs import read_metrics
from tests.integration.test_trainers import COMMON, TRAINERS
from tests.noise import FLOAT32_STEP, FLOAT64_STEP, Tolerance, assert_within
from tests.train.ranks import run_ranks

STRATEGIES = ("ddp", "fsdp")
CELLS = [(trainer, strategy) for trainer in TRAINERS for strategy in STRATEGIES]
BEFORE, AFTER = 3, 6  # steps on two ranks, then on one
# Trained in float64: the chaotic one (the module's docstring).
FLOAT64 = {"resnet"}
# Per trainer (python -m tests.noise -- TRAINER ARGUMENTS --max-steps 6, AMD EPYC,
# 2026-11-25). The floor: one float32 step (1.2e-7); at steps 1-2 the reordering variants
# (1 thread, torch's default kernels, oneDNN at SSE4.1, MKL's compatible path) parted from one
# process by less. Over the 6 steps, the most any variant or 2 ranks (DDP or FSDP, bitwise
# equal) parted: mnist 3.4e-5 (285x the floor, with oneDNN at SSE4.1; under 0.32x otherwise),
# toy 8.6e-8 (0.72x), gpt 1.8e-8 (0.15x). The multiple is 10x that, rounded up. resnet, in
# float64: 1 and 2 threads gave bitwise the same 6 steps, so the floor is one float64 step
# (2.2e-16); its growth is float32's (its variants parted by up to 3.2e4x their floor by
# step 6, with torch's default kernels), and the multiple 10x that, rounded up: 1.1e-10.
TOLERANCES = {
    "mnist": Tolerance(floor=FLOAT32_STEP, multiple=5000, steps=AFTER),
    "toy": Tolerance(floor=FLOAT32_STEP, multiple=10, steps=AFTER),
    "gpt": Tolerance(floor=FLOAT32_STEP, multiple=10, steps=AFTER),
    "resnet": Tolerance(floor=FLOAT64_STEP, multiple=500_000, steps=AFTER),
}
# A hang guard on each of the two processes: 5x the ~300 s both took together on a busy 2-core
# AMD EPYC (62 s for every cell in float32; resnet's ddp cell alone in float64: 151 s).
RANKS_GUARD_S = 1500.0


def _config_argv(trainer: str, strategy: str, out: Path, steps: int) -> list[str]:
    return ["train", trainer, *TRAINERS[trainer], *COMMON, "--strategy", strategy,
            "--max-steps", str(steps), "--out", str(out)]  # fmt: skip


def _train_all(rank: int, world_size: int, root: str, straight: bool) -> None:
    """Every cell on this rank: to step BEFORE with two ranks; with one, on to step AFTER
    (resuming, and, with ``straight``, also from scratch beside it)."""
    ctx = DistContext(
        rank=rank, world_size=world_size, local_rank=rank, local_world_size=world_size,
        node_rank=0, num_nodes=1, device=torch.device("cpu"), backend="gloo",
        timeout_s=120.0, cpu_share=rank_cpu_share(world_size, rank_is_task=False),
        cpu_threads_from_share=False, run_info={"source": "test"},
    )  # fmt: skip
    parser = build_parser("train")
    steps = BEFORE if world_size == 2 else AFTER
    for trainer, strategy in CELLS:
        outs = [Path(root, f"{trainer}-{strategy}")]
        if straight:
            outs.append(Path(root, f"{trainer}-{strategy}-straight"))
        torch.set_default_dtype(torch.float64 if trainer in FLOAT64 else torch.float32)
        for out in outs:
            config = train_config(parser.parse_args(_config_argv(trainer, strategy, out, steps)))
            assert run_training(config, ctx) == 0
    torch.set_default_dtype(torch.float32)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("world-size")
    for world_size, straight in ((2, False), (1, True)):
        work = functools.partial(
            _train_all, world_size=world_size, root=str(root), straight=straight
        )
        run_ranks(work, world_size, timeout_s=RANKS_GUARD_S)
    return root


@pytest.mark.torchrun
@pytest.mark.parametrize(("trainer", "strategy"), CELLS, ids=[f"{t}-{s}" for t, s in CELLS])
def test_two_ranks_then_one_follow_one_process(runs: Path, trainer: str, strategy: str) -> None:
    resumed, straight = runs / f"{trainer}-{strategy}", runs / f"{trainer}-{strategy}-straight"
    lines = [m for m in read_metrics(resumed) if m["kind"] == "train"]
    assert [m["step"] for m in lines] == list(range(1, AFTER + 1))
    summary = next(m for m in read_metrics(resumed) if m["kind"] == "summary")
    assert summary["world_size"] == 1
    expected = [m["loss"] for m in read_metrics(straight) if m["kind"] == "train"]
    what = f"{trainer} {strategy}: 2 ranks to step {BEFORE}, then 1, vs 1 process"
    assert_within([m["loss"] for m in lines], expected, TOLERANCES[trainer], what)
