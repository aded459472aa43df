"""Every trainer x strategy x precision that applies on one GPU, each cell checked by three
``train`` runs with ``--deterministic``:

1. *train*: N steps, a checkpoint at step K: the loss falls (the mean of the last two steps
   below that of the first two: small batches are noisy, and fp16's loss scaler skips its
   first steps while it finds its scale);
2. *resume*: from that checkpoint (``--resume PATH``, another ``--out``) to step N: steps
   K+1..N have bitwise the losses of run 1;
3. *repeat*: run 1 again from scratch: every step's loss is bitwise the same.

Cells run several at a time (``--jobs``; a GPT-124M cell counts double: its checkpoints
are 1.5-2 GB each), each only if its estimate fits the part's budget. Two ranks on the one
GPU use the backend the ``nccl-two-ranks`` step chose (Gloo where NCCL refuses). The dry run
checks a sample on the CPU (fp32 and bf16 only: DeepSpeed's CPU accelerator has no fp16):
DeepSpeed and FSDP on one rank, DDP on two, both precisions; ``--matrix full`` checks every
one-rank CPU cell (48, about 10 minutes on 2 cores).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

from parts.common import free_port

from runbook import commands
from runbook.commands import PYTHON, Ran
from runbook.model import Context, Outcome, Row, Status

GOAL = "loss falls; resume gives the same next losses; --deterministic repeats bitwise"
STRATEGIES: dict[str, list[str]] = {
    "ddp": ["--strategy", "ddp"],
    **{f"zero{s}": ["--strategy", "deepspeed", "--zero-stage", str(s)] for s in range(4)},
    "fsdp": ["--strategy", "fsdp"],
}
# bf16 first: a budget cut leaves out what matters least on an H100.
PRECISIONS = ("bf16", "fp32", "fp16")
DRY_PRECISIONS = ("fp32", "bf16")
COMMON = ["--epochs", "1", "--log-every", "1", "--warmup-steps", "0", "--seed", "7",
          "--deterministic"]  # fmt: skip
# A run takes seconds on a GPU; one that hangs (a collective no rank finishes) must not hold
# its slot for long. (The dry run replaces it with its hang guard: gpu_runbook.py.)
RUN_LIMIT_S = 150.0


@dataclass(frozen=True)
class TrainerCase:
    """How one trainer runs in a cell: its arguments (on the GPU, in the dry run), N and K,
    and the seconds a cell of three runs is expected to take under DDP. On the GPU: the
    H200's medians with 8 cells at once (2026-11-27, benchmarks/results/h200-2026-11-27-
    runbook-part2*.json: DDP and FSDP mnist 44 s, toy 41, resnet 40-42, gpt 64-76; DeepSpeed
    1.5x those) with a quarter added."""

    gpu: tuple[str, ...]
    dry: tuple[str, ...]
    steps: int
    checkpoint: int
    estimate_s: float
    dry_estimate_s: float
    weight: int = 1


TRAINERS: dict[str, TrainerCase] = {
    "mnist": TrainerCase(
        ("--batch-size", "64", "--train-samples", "2048", "--eval-samples", "256"),
        ("--batch-size", "64", "--train-samples", "2048", "--eval-samples", "256"),
        steps=8, checkpoint=4, estimate_s=55, dry_estimate_s=20,
    ),
    # Its rows are [x]*32 for row x, so its loss is large; lr 1e-3 makes it fall within the
    # steps (1e-4, the tutorial's, barely moves it), and 24 steps leave room for fp16's
    # loss scaler to back off from 2^16 first.
    "toy": TrainerCase(
        ("--gpus-per-replica", "1", "--lr", "1e-3", "--batch-size", "32",
         "--train-samples", "1536", "--eval-samples", "256"),
        ("--gpus-per-replica", "1", "--lr", "1e-3", "--batch-size", "32",
         "--train-samples", "1536", "--eval-samples", "256"),
        steps=24, checkpoint=12, estimate_s=52, dry_estimate_s=20,
    ),
    "resnet": TrainerCase(
        ("--arch", "resnet18", "--image-size", "32", "--batch-size", "16",
         "--train-samples", "256", "--eval-samples", "32"),
        ("--arch", "resnet18", "--image-size", "32", "--batch-size", "16",
         "--train-samples", "256", "--eval-samples", "32"),
        steps=8, checkpoint=4, estimate_s=52, dry_estimate_s=30,
    ),
    "gpt": TrainerCase(
        ("--size", "124m", "--seq-len", "128", "--batch-size", "4",
         "--train-samples", "256", "--eval-samples", "16"),
        ("--size", "tiny", "--seq-len", "32", "--batch-size", "16",
         "--train-samples", "512", "--eval-samples", "32"),
        steps=8, checkpoint=4, estimate_s=85, dry_estimate_s=25, weight=2,
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Cell:
    trainer: str
    strategy: str
    precision: str
    ranks: int = 1

    @property
    def name(self) -> str:
        ranks = f"/{self.ranks}-ranks" if self.ranks > 1 else ""
        return f"{self.trainer}/{self.strategy}/{self.precision}{ranks}"

    @property
    def case(self) -> TrainerCase:
        return TRAINERS[self.trainer]

    def estimate(self, dry_run: bool) -> float:
        seconds = self.case.dry_estimate_s if dry_run else self.case.estimate_s
        if self.strategy.startswith("zero"):
            seconds *= 1.3 if dry_run else 1.5
        return seconds * (1.6 if self.ranks > 1 else 1.0)

    def weight(self, dry_run: bool) -> int:
        return (1 if dry_run else self.case.weight) * self.ranks

    def arguments(self, dry_run: bool) -> list[str]:
        case = self.case
        return [self.trainer, *(case.dry if dry_run else case.gpu), *STRATEGIES[self.strategy],
                "--precision", self.precision, *COMMON, "--max-steps", str(case.steps)]  # fmt: skip


def one_rank_cells(dry_run: bool, full: bool) -> list[Cell]:
    """The GPU's whole product; in the dry run its CPU cells (``full``) or the sample."""
    if dry_run and not full:
        # With two_rank_cells' DDP cell: one cell per strategy family, both precisions.
        # DeepSpeed's first: its first start on a CPU compiles an op for a minute, while
        # the other cell runs beside it.
        return [Cell("gpt", "zero3", "bf16"), Cell("toy", "fsdp", "bf16")]
    precisions = DRY_PRECISIONS if dry_run else PRECISIONS
    return [Cell(t, s, p) for p, t, s in product(precisions, TRAINERS, STRATEGIES)]


def two_rank_cells(dry_run: bool) -> list[Cell]:
    """Every trainer under DDP (the GPU paths of SyncBatchNorm and the bucketed all-reduce),
    and GPT under each sharding strategy; fp32 (Gloo's own arithmetic where NCCL refuses)."""
    if dry_run:
        return [Cell("mnist", "ddp", "fp32", ranks=2)]
    return [
        *(Cell(trainer, "ddp", "fp32", ranks=2) for trainer in TRAINERS),
        *(
            Cell("gpt", strategy, "fp32", ranks=2)
            for strategy in ("zero1", "zero2", "zero3", "fsdp")
        ),
    ]


def error_line(ran: Ran) -> str:
    """The line that says why a run failed: ddpimg's error, else the last exception."""
    lines = [line.strip() for line in ran.output.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("ddpimg: error:") or re.match(r"^[\w.]+(Error|Exception): ", line):
            return line[:400]
    return (lines[-1][:400] if lines else "") or ran.verdict()


def train_losses(out: Path) -> dict[int, float]:
    """Step -> loss of the train lines of ``out/metrics.jsonl``."""
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line]
    return {line["step"]: line["loss"] for line in lines if line["kind"] == "train"}


def checkpoint_at(out: Path, step: int) -> Path | None:
    for path in (out / "checkpoints").glob("step-*"):
        if path.name.split("-", 1)[1].isdigit() and int(path.name.split("-", 1)[1]) == step:
            return path
    return None


def first_difference(got: dict[int, float], want: dict[int, float]) -> str | None:
    """None when ``got`` has exactly ``want``'s steps and bitwise the same losses."""
    if sorted(got) != sorted(want):
        return f"steps {sorted(got)}, expected {sorted(want)}"
    for step in sorted(want):
        if got[step] != want[step]:
            scale = max(abs(want[step]), 1e-30)
            return (
                f"step {step}: {got[step]!r} vs {want[step]!r} "
                f"(rel {abs(got[step] - want[step]) / scale:.1e})"
            )
    return None


def loss_falls(losses: Sequence[float]) -> bool:
    return (
        all(math.isfinite(x) for x in losses)
        and len(losses) >= 4
        and sum(losses[-2:]) < sum(losses[:2])
    )


class CellRunner:
    """The three runs of one cell, in ``root``; removed afterwards (checkpoints are large)."""

    def __init__(self, ctx: Context, cell: Cell, root: Path) -> None:
        self.ctx, self.cell, self.root = ctx, cell, root

    def train(self, name: str, *extra: str) -> tuple[Ran, Path]:
        out = self.root / name
        argv = [PYTHON, "-m", "ddpimg", "train", *self.cell.arguments(self.ctx.dry_run), *extra,
                "--out", str(out)]  # fmt: skip
        if self.cell.ranks > 1:
            backend = self.ctx.facts.get("two_rank_backend", "gloo")
            argv += ["--nproc-per-node", str(self.cell.ranks), "--backend", backend]
        env = dict(os.environ, MASTER_PORT=str(free_port()))
        if self.ctx.dry_run:
            env["OMP_NUM_THREADS"] = "1"  # cells run side by side on few cores
        ran = commands.run(argv, self.ctx.deadline, self.ctx.log, env=env, limit_s=RUN_LIMIT_S)
        return ran, out

    def check(self) -> tuple[Status, str, str, dict[str, Any]]:
        """(status, measured, detail, record)."""
        try:
            return self._check()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _check(self) -> tuple[Status, str, str, dict[str, Any]]:
        case = self.cell.case
        first, first_out = self.train(
            "train", "--checkpoint-every", str(case.checkpoint), "--keep-checkpoints", "2",
            "--resume", "none",
        )  # fmt: skip
        if not first.ok:
            return "fail", f"train: {first.verdict()}", error_line(first), {}
        losses = train_losses(first_out)
        ordered = [losses[step] for step in sorted(losses)]
        record: dict[str, Any] = {"losses": ordered, "seconds": [first.seconds]}
        measured = f"loss {ordered[0]:.4g} -> {ordered[-1]:.4g} in {len(ordered)} steps"
        problems = []
        if len(ordered) != case.steps or not loss_falls(ordered):
            problems.append(f"loss did not fall: {[round(x, 4) for x in ordered]}")
        checkpoint = checkpoint_at(first_out, case.checkpoint)
        if checkpoint is None:
            problems.append(f"no checkpoint of step {case.checkpoint} in {first_out}")
        else:
            resumed, resumed_out = self.train("resume", "--resume", str(checkpoint))
            record["seconds"].append(resumed.seconds)
            if not resumed.ok:
                problems.append(f"resume: {error_line(resumed)}")
            else:
                later = {s: x for s, x in losses.items() if s > case.checkpoint}
                differs = first_difference(train_losses(resumed_out), later)
                measured += f"; resumed at {case.checkpoint}: " + (
                    "same" if not differs else "DIFFERS"
                )
                if differs:
                    problems.append(f"resume differs: {differs}")
        shutil.rmtree(self.root / "resume", ignore_errors=True)
        shutil.rmtree(first_out, ignore_errors=True)
        repeated, repeated_out = self.train("repeat", "--resume", "none")
        record["seconds"].append(repeated.seconds)
        if not repeated.ok:
            problems.append(f"repeat: {error_line(repeated)}")
        else:
            differs = first_difference(train_losses(repeated_out), losses)
            measured += "; repeat: " + ("bitwise" if not differs else "DIFFERS")
            if differs:
                problems.append(f"repeat differs: {differs}")
        return ("fail" if problems else "pass"), measured, "; ".join(problems), record


def run_cells(ctx: Context, step: str, cells: Sequence[Cell]) -> Outcome:
    """Check ``cells`` (those ``--only`` lets through) side by side within ``--jobs``."""
    selected = [cell for cell in cells if ctx.selected(f"{step}/{cell.name}")]
    capacity = max(1, ctx.jobs)
    in_use = 0
    slots = threading.Condition()

    def check(cell: Cell) -> tuple[Row, dict[str, Any]]:
        nonlocal in_use
        weight = min(cell.weight(ctx.dry_run), capacity)
        with slots:
            slots.wait_for(lambda: in_use + weight <= capacity)
            refusal = ctx.deadline.refusal(cell.estimate(ctx.dry_run))
            if refusal is None:
                in_use += weight
        name = f"{step}/{cell.name}"
        if refusal is not None:
            return Row(name, GOAL, "not run", "skip", refusal), {}
        commands.progress(f"{name} ...")
        try:
            status, measured, detail, record = CellRunner(
                ctx, cell, ctx.work / step / cell.name.replace("/", "-")
            ).check()
        except Exception as err:  # one broken cell must not stop the others
            status, measured, detail, record = (
                "fail",
                "runner error",
                f"{type(err).__name__}: {err}",
                {},
            )
        finally:
            with slots:
                in_use -= weight
                slots.notify_all()
        commands.progress(f"{name}: {status}")
        return Row(name, GOAL, measured, status, detail), record

    with ThreadPoolExecutor(max_workers=capacity) as pool:
        results = list(pool.map(check, selected))
    rows = [row for row, _ in results]
    counts = {
        status: sum(row.status == status for row in rows) for status in ("pass", "fail", "skip")
    }
    measured = (
        f"{len(rows)} cells: {counts['pass']} pass, {counts['fail']} fail, {counts['skip']} not run"
    )
    status: Status = "fail" if counts["fail"] else "skip" if counts["skip"] else "pass"
    record = {row.name: cell_record for row, (_, cell_record) in zip(rows, results, strict=True)}
    return Outcome(status, measured, record=record, rows=rows)


def matrix(ctx: Context) -> Outcome:
    cells = one_rank_cells(ctx.dry_run, ctx.full_matrix)
    outcome = run_cells(ctx, "matrix", cells)
    if ctx.dry_run and not ctx.full_matrix:
        whole = len(one_rank_cells(True, True))
        outcome.measured += f" (the dry run's sample of {whole} CPU cells; --matrix full: all)"
    return outcome


def matrix_two_ranks(ctx: Context) -> Outcome:
    outcome = run_cells(ctx, "matrix-two-ranks", two_rank_cells(ctx.dry_run))
    outcome.measured += f"; backend {ctx.facts.get('two_rank_backend', 'gloo')}"
    return outcome
