"""Gradient accumulation (``--micro-batch-size``): what it costs per sample and what memory
it holds.

* Throughput: steady samples/s of steps of A = 4 micro-batches of m accumulated, against
  steps of one batch of m (the same size of forward pass, no accumulation): gpt-tiny and
  the MNIST CNN, on 1 rank and on 2 local ranks (where the micro-batches before the last
  skip the all-reduce). Goal: at least 0.97x (accumulation costs at most 3%); fewer
  optimizer steps and all-reduces a sample make it cheaper, if anything.
* Memory: peak resident set (``wait4``) of one process training the MNIST CNN (its
  activations, about 150 KB a sample, are most of what a step holds) with micro-batches of
  64 and A = 1, 4, 16 (global batches of 64, 256 and 1,024), against the same global batches
  in one pass. Goal: flat in A (the largest within 5% of A = 1); in one pass it grows with
  the batch.

Every comparison runs in interleaved rounds (``interleaved``); ratios within a round.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

from parts.common import PYTHON, Row, interleaved, peak_rss_kib, run_train, spread

ACCUMULATION = 4
MODELS: dict[str, dict[str, Any]] = {
    "gpt-tiny": {"train": ["gpt", "--size", "tiny"], "micro": 16, "steps": 60, "warmup": 10},
    "mnist": {"train": ["mnist"], "micro": 32, "steps": 60, "warmup": 10},
}
MEMORY_TRAIN = ["mnist"]
MEMORY_MICRO, MEMORY_STEPS = 64, 4
MEMORY_ACCUMULATION = (1, 4, 16)


def _samples_per_s(model: str, ranks: int, accumulated: bool) -> float:
    spec = MODELS[model]
    micro, steps = spec["micro"], spec["steps"]
    per_rank = micro * ACCUMULATION if accumulated else micro
    samples = per_rank * ranks * steps
    batch = ["--batch-size", str(per_rank), "--micro-batch-size", str(micro)]
    launch = ["--nproc-per-node", str(ranks)] if ranks > 1 else []
    run = run_train(
        [*spec["train"], *batch, *launch, "--train-samples", str(samples), "--eval-samples", "64"],
        steps=steps,
        warmup=spec["warmup"],
    )
    return float(run.summary["steady_samples_per_s"])


def _peak_mib(global_batch: int, micro: int) -> float:
    with tempfile.TemporaryDirectory(prefix="ddpimg-bench-") as out:
        command = [
            PYTHON, "-m", "ddpimg", "train", *MEMORY_TRAIN, "--batch-size", str(global_batch),
            "--micro-batch-size", str(micro), "--train-samples", str(global_batch * MEMORY_STEPS),
            "--eval-samples", "8", "--epochs", "1", "--max-steps", str(MEMORY_STEPS),
            "--out", str(Path(out)), "--resume", "none",
        ]  # fmt: skip
        _, peak_kib = peak_rss_kib(command)
    return peak_kib / 1024


def _throughput(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    record: dict[str, Any] = {}
    for model, spec in MODELS.items():
        for ranks in (1, 2):
            rounds = interleaved(
                {
                    "one pass": functools.partial(_samples_per_s, model, ranks, False),
                    "accumulated": functools.partial(_samples_per_s, model, ranks, True),
                },
                repeats,
                f"{model} accumulation, {ranks} rank(s)",
            )
            ratio = spread([r["accumulated"] / r["one pass"] for r in rounds])
            rates = {k: spread([r[k] for r in rounds])["median"] for k in rounds[0]}
            rows.append(
                (
                    f"{model}: samples/s, {ACCUMULATION} micro-batches of {spec['micro']} a step "
                    f"/ one batch of {spec['micro']} a step, {ranks} rank(s) ({repeats} rounds)",
                    f"median **{ratio['median']:.3f}x** (min {ratio['min']:.3f}, max "
                    f"{ratio['max']:.3f}); {rates['accumulated']:.0f} vs "
                    f"{rates['one pass']:.0f} samples/s",
                    ">= 0.97x",
                )
            )
            record[f"{model}, {ranks} rank(s)"] = rounds
    return rows, record


def _memory(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    runners = {}
    for steps in MEMORY_ACCUMULATION:
        batch = MEMORY_MICRO * steps
        runners[f"micro {MEMORY_MICRO} x {steps}"] = functools.partial(
            _peak_mib, batch, MEMORY_MICRO
        )
        if steps > 1:
            runners[f"one pass of {batch}"] = functools.partial(_peak_mib, batch, batch)
    rounds = interleaved(runners, repeats, "accumulation memory")
    median = {name: spread([r[name] for r in rounds])["median"] for name in runners}
    base = median[f"micro {MEMORY_MICRO} x 1"]
    largest = MEMORY_ACCUMULATION[-1]
    accumulated = median[f"micro {MEMORY_MICRO} x {largest}"]
    one_pass = median[f"one pass of {MEMORY_MICRO * largest}"]
    cells = ", ".join(f"{name} {value:.0f} MiB" for name, value in median.items())
    rows: list[Row] = [
        (
            f"mnist, 1 process: peak RSS with micro-batches of {MEMORY_MICRO} "
            f"x {largest} / x 1 ({repeats} rounds)",
            f"**{accumulated / base:.3f}x** ({cells})",
            "<= 1.05x",
        ),
        (
            f"the same global batch of {MEMORY_MICRO * largest} in one pass / micro-batches "
            f"of {MEMORY_MICRO} x 1",
            f"{one_pass / base:.2f}x",
            "",
        ),
    ]
    return rows, {"peak_mib": rounds}


def run(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    rows, throughput = _throughput(repeats)
    memory_rows, memory = _memory(repeats)
    return rows + memory_rows, {"throughput": throughput, "memory": memory}
