"""``train --compile``: compiled runs follow the eager trajectory, report their compile time
apart, and share checkpoints with eager runs, for DDP, FSDP2 and DeepSpeed.

Two spawned gloo groups (two interpreter starts for the lot), every run through
``run_training`` as ``train`` runs it:

1. one rank: toy eager with two intra-op threads and with one (the noise floor of this
   configuration, measured here), and compiled with inductor (the kernels it generates,
   built with gcc); mnist eager, the reference of phase 2;
2. two ranks, per strategy (DDP, FSDP2, DeepSpeed ZeRO-2), mnist for STEPS steps with a
   checkpoint at HALF: eager, and compiled with aot_eager (the same graphs as inductor's,
   traced and partitioned into forward and backward the same way, run on torch's kernels:
   seconds to compile instead of a minute); then on from HALF to STEPS, compiled from the
   eager checkpoint and eager from the compiled one.

Claims:
- inductor's toy run has the eager run's losses within the floor measured in phase 1 (1
  against 2 threads, at least one float32 step) times toy's multiple; its summary says how
  long it compiled (``compile_s``), rank 0 says so on stderr, and the throughput leaves
  that time out;
- each strategy's compiled run has the eager run's losses within mnist's floor (the eager
  run on one rank against two: another world size, phase 1 against phase 2) times
  QUICK_TOLERANCE's multiple: dynamo graph-breaks around the dropout layers, whose masks
  stay eager and the same;
- checkpoints are interchangeable: each resumed run continues with the eager run's losses,
  within the same tolerance (the state dicts hold no ``_orig_mod.`` prefixes: the modules
  are compiled in place).

Cost (2-core AMD EPYC beside other work, load average 5-6, 2026-11-29): 78 s for the file,
63 CPU-seconds, with an empty inductor cache (its toy compile 17 s of it); 71 s with the
cache warm. The toy and mnist models are the cheapest to compile: mnist with inductor took
70 s alone.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

import pytest
import torch

from ddpimg.cli import build_parser
from ddpimg.cli.train_options import train_config
from ddpimg.runtime.context import DistContext
from ddpimg.train import run_training
from ddpimg.train.checkpoint.files import checkpoint_name
from tests.integration.runs import QUICK_TOLERANCE, read_metrics, summary, train_losses
from tests.integration.test_any_shape import MULTIPLES, _context
from tests.noise import FLOAT32_STEP, Tolerance, assert_within, floor_between
from tests.train.ranks import run_ranks

STEPS, HALF = 4, 2
MNIST = [
    "mnist", "--data", "synthetic", "--epochs", "1", "--max-steps", str(STEPS),
    "--log-every", "1", "--global-batch-size", "32", "--train-samples", "512",
    "--eval-samples", "64", "--seed", "7", "--lr", "0.1", "--checkpoint-every", str(HALF),
]  # fmt: skip
TOY = [
    "toy", "--epochs", "1", "--max-steps", "6", "--log-every", "1", "--warmup-steps", "2",
    "--global-batch-size", "32", "--train-samples", "4096", "--eval-samples", "256",
    "--seed", "3",
]  # fmt: skip
STRATEGIES = {
    "ddp": ["--strategy", "ddp"],
    "fsdp": ["--strategy", "fsdp"],
    "zero2": ["--strategy", "deepspeed", "--zero-stage", "2"],
}
COMPILED = ["--compile", "--compile-backend", "aot_eager"]
# A hang guard on each phase: about 5x what each took on a busy 2-core machine.
PHASE_GUARD_S = 400.0


def _train(ctx: DistContext, argv: list[str], out: Path, stderr: Path | None = None) -> None:
    """``train ARGV --out OUT`` on this rank; rank 0's stderr into ``stderr`` if given."""
    # One process trains several models: dynamo's caches (and its limit of 8 recompiles
    # of one function) are for one model's run.
    torch._dynamo.reset()
    config = train_config(build_parser("train").parse_args(["train", *argv, "--out", str(out)]))
    with contextlib.ExitStack() as stack:
        if stderr is not None and ctx.is_main:
            stack.enter_context(contextlib.redirect_stderr(stack.enter_context(stderr.open("w"))))
        assert run_training(config, ctx) == 0


def _one_rank(rank: int, root: str) -> None:
    work, ctx = Path(root), _context(rank, 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _train(ctx, TOY, work / "toy-one-thread")
    finally:
        torch.set_num_threads(threads)
    _train(ctx, TOY, work / "toy-eager")
    _train(ctx, [*TOY, "--compile"], work / "toy-inductor", stderr=work / "toy-inductor.err")
    _train(ctx, MNIST, work / "mnist-one-rank")


def _two_ranks(rank: int, root: str) -> None:
    work, ctx = Path(root), _context(rank, 2)
    # DeepSpeed reads the local rank from the environment (train exports it).
    os.environ["LOCAL_RANK"] = str(rank)
    for name, flags in STRATEGIES.items():
        eager, compiled = work / f"{name}-eager", work / f"{name}-compiled"
        _train(ctx, [*MNIST, *flags], eager)
        _train(ctx, [*MNIST, *flags, *COMPILED], compiled)
        for source, resumed, extra in ((eager, "compiled-from-eager", COMPILED),
                                       (compiled, "eager-from-compiled", [])):  # fmt: skip
            checkpoint = source / "checkpoints" / checkpoint_name(HALF)
            argv = [*MNIST, *flags, *extra, "--resume", str(checkpoint)]
            _train(ctx, argv, work / f"{name}-{resumed}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compile")
    run_ranks(functools.partial(_one_rank, root=str(root)), 1, timeout_s=PHASE_GUARD_S)
    run_ranks(functools.partial(_two_ranks, root=str(root)), 2, timeout_s=PHASE_GUARD_S)
    return root


def _steps(out: Path) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in read_metrics(out) if m["kind"] == "train"}


@pytest.mark.torchrun
def test_inductor_follows_the_eager_trajectory_and_reports_its_compile_time(runs: Path) -> None:
    eager, inductor = train_losses(runs / "toy-eager"), train_losses(runs / "toy-inductor")
    floor = floor_between(eager, train_losses(runs / "toy-one-thread"), FLOAT32_STEP)
    tolerance = Tolerance(floor, MULTIPLES["toy"], len(eager))
    assert_within(inductor, eager, tolerance, "toy: inductor vs eager")
    record = summary(runs / "toy-inductor")
    assert "compile_s" not in summary(runs / "toy-eager")
    compile_s = record["compile_s"]
    assert compile_s > 0
    # The rate counts training time only: at most the wall time less the compile time.
    samples = record["steps"] * record["global_batch_size"]
    assert record["samples_per_s"] >= samples / (record["elapsed_s"] - compile_s)
    err = (runs / "toy-inductor.err").read_text()
    assert "ddpimg: compiled the model in " in err, err


def _mnist_tolerance(runs: Path) -> Tolerance:
    """mnist's floor: the eager run on one rank against two (DDP), times QUICK_TRAIN's
    multiple (tests.integration.runs: the same model at a tenth of its learning rate)."""
    one_rank = list(_steps(runs / "mnist-one-rank").values())
    two_ranks = list(_steps(runs / "ddp-eager").values())
    floor = floor_between(one_rank, two_ranks, FLOAT32_STEP)
    return Tolerance(floor, QUICK_TOLERANCE.multiple, STEPS)


@pytest.mark.torchrun
@pytest.mark.deepspeed
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_compiled_runs_follow_eager_and_share_checkpoints(runs: Path, strategy: str) -> None:
    tolerance = _mnist_tolerance(runs)
    eager = _steps(runs / f"{strategy}-eager")
    assert list(eager) == list(range(1, STEPS + 1))
    compiled = _steps(runs / f"{strategy}-compiled")
    assert list(compiled) == list(eager)
    assert_within(list(compiled.values()), list(eager.values()), tolerance, f"{strategy} compiled")
    assert summary(runs / f"{strategy}-compiled")["compile_s"] > 0
    for resumed in ("compiled-from-eager", "eager-from-compiled"):
        losses = _steps(runs / f"{strategy}-{resumed}")
        assert list(losses) == list(range(HALF + 1, STEPS + 1)), resumed
        expected = [eager[step] for step in losses]
        assert_within(list(losses.values()), expected, tolerance, f"{strategy} {resumed}")
