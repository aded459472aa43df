"""One trajectory on any cluster shape (DESIGN.md): a run is its global batch, seed and data
order; the world size, the micro-batch and the strategy only decide how a step is computed.

Every cell (a trainer and a strategy) trains with micro-batches of m = global batch / 2, in
three phases, each one spawned gloo group training every cell in turn (three interpreter
starts for the lot):

1. two ranks, one micro-batch each a step: to step BEFORE, checkpointing there;
2. one rank, two micro-batches a step (gradient accumulation): on from phase 1's checkpoint
   to step AFTER (resumed on fewer ranks), and from scratch to AFTER (straight),
   checkpointing at BEFORE; per trainer once more, straight, with one intra-op thread
   instead of the others' two: the noise floor;
3. two ranks again, for the GROWN cells: on from phase 2's straight checkpoint to AFTER
   (resumed on more ranks).

Claims, each compared with the straight run of phase 2:
- steps 1..BEFORE of phase 1: two ranks of m are one rank accumulating two micro-batches of
  m, for DDP, FSDP and DeepSpeed ZeRO-1/2/3;
- steps BEFORE+1..AFTER of phases 2 and 3: a checkpoint continues on half or twice its
  world size with the straight run's losses, every strategy; DeepSpeed's through ddpimg's
  universal form, made beside the checkpoint.

Tolerance: the floor is measured in this test (phase 2: one intra-op thread against two, the
largest difference at steps 1-2, never under one rounding step of the dtype trained in);
the multiple, per trainer, is how far rounding grows over the steps compared (``python -m
tests.noise``, AMD EPYC: the reordering variants and 2 ranks parted from one process by at
most mnist 0.29x the floor (2026-12-07, each unit's dropout draw hashed from its place; with
a generator per row 0.36x, with the masks drawn for the whole batch oneDNN at SSE4.1 had
reached 285x), toy 0.72x, gpt 0.15x
(2026-11-25); resnet, from scratch, grows about 30x a step in float32, so its cells
train in float64 (torch's default dtype, in every phase), where 1 and 2 threads gave
bitwise the same 6 steps and its variants parted by up to 3.2e4x their floor by step 6;
each multiple is 10x the most seen, rounded up). What the compared runs differ in here is
small next to that: the same micro-batches (the same kernels), their gradients summed in
pairs by the all-reduce or by the accumulation, halved once (exact). The resnet cells
normalise per rank (``--no-sync-batchnorm``): BatchNorm then takes statistics of m samples
in every phase; synchronised it would take 2m on two ranks and m on one, which the
fingerprint refuses (tests/train/checkpoint/test_state.py).

DeepSpeed's state is also compared exactly, without a trajectory (DeepSpeed keeps float32
master weights, so resnet would be chaotic there; EXACT): per ZeRO stage, a small model with
parameters no world size divides evenly and a BatchNorm layer, under an optimizer that keeps
other state than Adam's for two of them, takes two steps on two ranks and is saved; one
rank loads that checkpoint through the universal form and saves it again, and two ranks do
the same with that one. Each checkpoint, read back into ddpimg's universal form, holds
bitwise the first one's master weights, optimizer state, step counts, param-group values,
buffers and counters.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from ddpimg.cli import build_parser
from ddpimg.cli.train_options import train_config
from ddpimg.runtime.context import DistContext
from ddpimg.runtime.device import rank_cpu_share
from ddpimg.train import run_training
from ddpimg.train.batch import BatchLayout
from ddpimg.train.checkpoint.files import checkpoint_name
from ddpimg.train.config import TrainConfig
from ddpimg.train.strategies.deepspeed import CHECKPOINT_TAG, DeepSpeedStrategy
from ddpimg.train.strategies.deepspeed_universal import UNIVERSAL, Universal, convert, read
from tests.integration.runs import read_metrics
from tests.integration.test_trainers import COMMON, TRAINERS
from tests.noise import FLOAT32_STEP, FLOAT64_STEP, Tolerance, assert_within, floor_between
from tests.train.ranks import run_ranks

STRATEGIES = {
    "ddp": ["--strategy", "ddp"],
    "fsdp": ["--strategy", "fsdp"],
    "zero1": ["--strategy", "deepspeed", "--zero-stage", "1"],
    "zero2": ["--strategy", "deepspeed", "--zero-stage", "2"],
    "zero3": ["--strategy", "deepspeed", "--zero-stage", "3"],
}
# Every trainer under DDP and FSDP; each ZeRO stage with a trainer of little chaos (mnist:
# Adadelta; gpt: AdamW). DeepSpeed with SGD's momentum and BatchNorm buffers: EXACT.
CELLS = [(t, s) for t in TRAINERS for s in ("ddp", "fsdp")] + [
    ("mnist", "zero1"),
    ("gpt", "zero2"),
    ("gpt", "zero3"),
]
GROWN = [("gpt", "ddp"), ("gpt", "fsdp"), ("gpt", "zero2"), ("gpt", "zero3")]
BEFORE, AFTER = 3, 6
# The cells trained in float64 (the module's docstring).
FLOAT64 = {("resnet", "ddp"), ("resnet", "fsdp")}
# Growth of rounding over the steps compared, per trainer (the module's docstring).
MULTIPLES = {"mnist": 5, "toy": 10, "gpt": 10, "resnet": 500_000}
# DeepSpeed's state carried exactly: per ZeRO stage, the optimizer of the small model.
EXACT = {1: "adadelta", 2: "adamw", 3: "sgd"}
# A hang guard on each phase: 5x the ~190 s the three took together on a 2-core AMD EPYC
# beside other work.
PHASE_GUARD_S = 1000.0


def _name(trainer: str, strategy: str) -> str:
    return f"{trainer}-{strategy}"


def _argv(trainer: str, strategy: str, out: Path, steps: int) -> list[str]:
    micro = int(TRAINERS[trainer][TRAINERS[trainer].index("--global-batch-size") + 1]) // 2
    batchnorm = ["--no-sync-batchnorm"] if trainer == "resnet" else []
    return [
        "train", trainer, *TRAINERS[trainer], *COMMON, *STRATEGIES[strategy], *batchnorm,
        "--micro-batch-size", str(micro), "--max-steps", str(steps),
        "--checkpoint-every", str(BEFORE), "--out", str(out),
    ]  # fmt: skip


def _train(ctx: DistContext, trainer: str, strategy: str, argv: list[str]) -> None:
    float64 = (trainer, strategy) in FLOAT64
    torch.set_default_dtype(torch.float64 if float64 else torch.float32)
    try:
        config = train_config(build_parser("train").parse_args(argv))
        assert run_training(config, ctx) == 0
    finally:
        torch.set_default_dtype(torch.float32)


def _context(rank: int, world_size: int) -> DistContext:
    return DistContext(
        rank=rank, world_size=world_size, local_rank=rank, local_world_size=world_size,
        node_rank=0, num_nodes=1, device=torch.device("cpu"), backend="gloo",
        timeout_s=300.0, cpu_share=rank_cpu_share(world_size, rank_is_task=False),
        cpu_threads_from_share=False, run_info={"source": "test"},
    )  # fmt: skip


def _phase(rank: int, world_size: int, root: str, phase: int) -> None:
    """Every cell of ``phase`` on this rank, then its part of EXACT (the module's
    docstring)."""
    ctx = _context(rank, world_size)
    # DeepSpeed reads the local rank from the environment (train exports it).
    os.environ["LOCAL_RANK"] = str(rank)
    work = Path(root)
    for trainer, strategy in CELLS:
        name = _name(trainer, strategy)
        if phase == 1:
            _train(ctx, trainer, strategy, _argv(trainer, strategy, work / name, BEFORE))
        elif phase == 2:
            source = work / name / "checkpoints" / checkpoint_name(BEFORE)
            resumed = _argv(trainer, strategy, work / f"{name}-fewer", AFTER)
            _train(ctx, trainer, strategy, [*resumed, "--resume", str(source)])
            straight = _argv(trainer, strategy, work / f"{name}-straight", AFTER)
            _train(ctx, trainer, strategy, straight)
            if strategy == "ddp":
                threads = torch.get_num_threads()
                torch.set_num_threads(1)
                try:
                    out = work / f"{trainer}-one-thread"
                    _train(ctx, trainer, strategy, _argv(trainer, strategy, out, AFTER))
                finally:
                    torch.set_num_threads(threads)
        elif (trainer, strategy) in GROWN:
            source = work / f"{name}-straight" / "checkpoints" / checkpoint_name(BEFORE)
            grown = _argv(trainer, strategy, work / f"{name}-more", AFTER)
            _train(ctx, trainer, strategy, [*grown, "--resume", str(source)])
    for stage in EXACT:
        _exact(ctx, stage, work / f"exact-zero{stage}", phase)


class Small(nn.Module):
    """Parameters of 35, 7, 7 and 21 elements (no world size of 2 or 3 divides them all)
    and a BatchNorm layer's buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(5, 7)
        self.norm = nn.BatchNorm1d(7)
        self.outer = nn.Linear(7, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(self.norm(self.inner(x)).relu())


def _optimizer(kind: str, module: nn.Module) -> torch.optim.Optimizer:
    if kind == "adadelta":
        return torch.optim.Adadelta(module.parameters(), lr=1.0)
    if kind == "adamw":
        return torch.optim.AdamW(module.parameters(), lr=1e-2, weight_decay=0.1)
    return torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)


# Where each phase saves, and the checkpoint (and its world size) it continues from.
EXACT_SAVED = {1: "two", 2: "one", 3: "again"}
EXACT_FROM = {2: ("two", 2), 3: ("one", 1)}


def _exact(ctx: DistContext, stage: int, work: Path, phase: int) -> None:
    """Phase 1: two steps of Small, saved; phases 2 and 3: the previous phase's checkpoint
    loaded (on another world size: the universal form) and saved again at once."""
    config = TrainConfig(strategy="deepspeed", zero_stage=stage, precision="fp32", batch_size=4)
    strategy = DeepSpeedStrategy(config, ctx, BatchLayout(4, ctx.world_size))
    torch.manual_seed(phase)  # another initialisation in every phase: the load must win
    engine = strategy.wrap(Small(), functools.partial(_optimizer, EXACT[stage]))
    if phase == 1:
        generator = torch.Generator().manual_seed(ctx.rank)
        for _ in range(2):
            with strategy.micro_batch(last=True):
                strategy.backward(engine(torch.randn(4, 5, generator=generator)).pow(2).mean())
            strategy.step()
    else:
        source, world_size = EXACT_FROM[phase]
        strategy.load(work / source, world_size)
    target = work / EXACT_SAVED[phase]
    if ctx.is_main:
        target.mkdir(parents=True)
    dist.barrier()
    strategy.save(target)
    dist.barrier()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("any-shape")
    for phase, world_size in ((1, 2), (2, 1), (3, 2)):
        work = functools.partial(_phase, world_size=world_size, root=str(root), phase=phase)
        run_ranks(work, world_size, timeout_s=PHASE_GUARD_S)
    return root


def _losses(out: Path) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in read_metrics(out) if m["kind"] == "train"}


def _tolerance(runs: Path, trainer: str, strategy: str, steps: int) -> Tolerance:
    """The floor measured in phase 2 for ``trainer`` (its DDP cell's straight run with 1
    and 2 threads), times the trainer's multiple."""
    two = list(_losses(runs / f"{_name(trainer, 'ddp')}-straight").values())
    one = list(_losses(runs / f"{trainer}-one-thread").values())
    least = FLOAT64_STEP if (trainer, strategy) in FLOAT64 else FLOAT32_STEP
    return Tolerance(floor_between(two, one, least), MULTIPLES[trainer], steps)


IDS = [_name(t, s) for t, s in CELLS]


@pytest.mark.torchrun
@pytest.mark.deepspeed
@pytest.mark.parametrize(("trainer", "strategy"), CELLS, ids=IDS)
def test_two_ranks_are_one_rank_accumulating(runs: Path, trainer: str, strategy: str) -> None:
    name = _name(trainer, strategy)
    two_ranks, straight = _losses(runs / name), _losses(runs / f"{name}-straight")
    assert list(two_ranks) == list(range(1, BEFORE + 1))
    summary = next(m for m in read_metrics(runs / f"{name}-straight") if m["kind"] == "summary")
    assert (summary["world_size"], summary["accumulation_steps"]) == (1, 2)
    expected = [straight[step] for step in two_ranks]
    tolerance = _tolerance(runs, trainer, strategy, BEFORE)
    what = f"{name}: 2 ranks x 1 micro-batch vs 1 rank x 2 micro-batches"
    assert_within(list(two_ranks.values()), expected, tolerance, what)


@pytest.mark.torchrun
@pytest.mark.deepspeed
@pytest.mark.parametrize(("trainer", "strategy"), CELLS, ids=IDS)
def test_two_ranks_then_one_follow_the_straight_run(
    runs: Path, trainer: str, strategy: str
) -> None:
    _assert_continues(runs, trainer, strategy, "fewer", world_size=1)


@pytest.mark.torchrun
@pytest.mark.deepspeed
@pytest.mark.parametrize(("trainer", "strategy"), GROWN, ids=[_name(*c) for c in GROWN])
def test_one_rank_then_two_follow_the_straight_run(runs: Path, trainer: str, strategy: str) -> None:
    _assert_continues(runs, trainer, strategy, "more", world_size=2)


def _assert_continues(runs: Path, trainer: str, strategy: str, how: str, world_size: int) -> None:
    name = _name(trainer, strategy)
    resumed, straight = _losses(runs / f"{name}-{how}"), _losses(runs / f"{name}-straight")
    # --resume PATH from another --out: the metrics start after the checkpoint.
    assert list(resumed) == list(range(BEFORE + 1, AFTER + 1))
    summary = next(m for m in read_metrics(runs / f"{name}-{how}") if m["kind"] == "summary")
    assert summary["world_size"] == world_size
    expected = [straight[step] for step in resumed]
    tolerance = _tolerance(runs, trainer, strategy, AFTER - BEFORE)
    what = f"{name}: resumed on {world_size} rank(s) at step {BEFORE} vs straight"
    assert_within(list(resumed.values()), expected, tolerance, what)
    if strategy.startswith("zero"):
        # The universal form was made beside the checkpoint it continued from.
        source, source_world = (f"{name}-straight", 1) if how == "more" else (name, 2)
        checkpoint = runs / source / "checkpoints" / checkpoint_name(BEFORE) / "deepspeed"
        universal = read(checkpoint / UNIVERSAL)
        assert universal.source_world_size == source_world
        assert universal.counters["global_steps"] == BEFORE


def _assert_same_state(found: Universal, expected: Universal, what: str) -> None:
    assert found.shapes == expected.shapes, what
    assert sorted(found.state) == sorted(expected.state), what
    for name in expected.shapes:
        assert torch.equal(found.fp32[name], expected.fp32[name]), f"{what}: {name}"
        for key, values in expected.state.items():
            assert torch.equal(found.state[key][name], values[name]), f"{what}: {key} {name}"
    for got, want in zip(found.groups, expected.groups, strict=True):
        assert (got.hyper, got.plain) == (want.hyper, want.plain), what
        assert got.scalars.keys() == want.scalars.keys(), what
        assert all(torch.equal(got.scalars[k], v) for k, v in want.scalars.items()), what
    assert found.buffers.keys() == expected.buffers.keys(), what
    assert all(torch.equal(found.buffers[k], v) for k, v in expected.buffers.items()), what
    assert found.counters == expected.counters, what


@pytest.mark.torchrun
@pytest.mark.deepspeed
@pytest.mark.parametrize("stage", list(EXACT), ids=[f"zero{s}-{o}" for s, o in EXACT.items()])
def test_deepspeed_state_crosses_world_sizes_exactly(runs: Path, stage: int) -> None:
    work = runs / f"exact-zero{stage}"
    expected = convert(work / "two" / CHECKPOINT_TAG)
    assert expected.source_world_size == 2
    assert expected.counters["global_steps"] == 2
    assert expected.state, "the optimizer kept no state: nothing would be compared"
    assert (work / "two" / UNIVERSAL).is_dir()  # made by phase 2's load, beside it
    for saved, world_size in (("one", 1), ("again", 2)):
        found = convert(work / saved / CHECKPOINT_TAG)
        assert found.source_world_size == world_size
        _assert_same_state(found, expected, f"ZeRO-{stage}, saved on {world_size} rank(s)")
