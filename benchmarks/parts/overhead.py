"""What distribution costs (steps/s after warm-up):

* torch's DDP on one rank against the bare model, for the MNIST CNN, GPT-tiny and
  ResNet-18 at 64 px: DDP's hooks, bucketing and the all-reduce of a world of one, as the
  tutorials wrap it and with ``gradient_as_bucket_view``
  (benchmarks/ddp_one_rank.py, each variant in a process of its own). ddpimg trains the
  bare model when there is one rank, because of this.
* Two local ranks against one at the same per-rank batch (weak scaling over gloo):
  efficiency = samples/s of 2 ranks / (2 x samples/s of 1 rank). On a machine with as
  many cores as ranks, one rank alone already uses every core (intra-op threads), so the
  ideal is not 1.0 there: the figure says what gloo's all-reduce and the split of the
  cores cost together.
* DeepSpeed ZeRO 0/1/2/3 and FSDP against DDP: two local ranks, the same global batch.

The weak-scaling and strategy rows run ddpimg's own ``train``. Every comparison runs in
rounds, each configuration once per round in a shuffled order; ratios are taken within a
round.
"""

from __future__ import annotations

import functools
import json
import statistics
import subprocess
from collections.abc import Sequence
from typing import Any

from parts.common import HERE, PYTHON, Row, interleaved, run_train, spread

MODELS: dict[str, dict[str, Any]] = {
    # Long enough for several seconds of measured steps; samples for 2 ranks x steps.
    "mnist": {"train": ["mnist"], "batch": 64, "steps": 150, "warmup": 20, "samples": 19200},
    # The synthetic token set holds 10,000 training windows: 150 steps of 2 x 32.
    "gpt-tiny": {
        "train": ["gpt", "--size", "tiny"],
        "batch": 32,
        "steps": 150,
        "warmup": 20,
        "samples": 9600,
    },
}
STRATEGIES: dict[str, list[str]] = {
    "ddp": ["--strategy", "ddp"],
    "fsdp": ["--strategy", "fsdp"],
    **{
        f"zero-{stage}": ["--strategy", "deepspeed", "--zero-stage", str(stage)]
        for stage in range(4)
    },
}
STRATEGY_MODEL = "gpt-tiny"


def _samples_per_s(model: str, extra: Sequence[str], batch: tuple[str, int]) -> float:
    spec = MODELS[model]
    flag, size = batch
    run = run_train(
        [
            *spec["train"], flag, str(size), "--train-samples", str(spec["samples"]),
            "--eval-samples", "64", *extra,
        ],
        steps=spec["steps"],
        warmup=spec["warmup"],
    )  # fmt: skip
    return float(run.summary["steady_samples_per_s"])


def _ratio_row(what: str, rounds: list[dict[str, float]], a: str, b: str, target: str) -> Row:
    ratios = spread([r[a] / r[b] for r in rounds])
    return (
        what,
        f"median {ratios['median']:.3f}x (min {ratios['min']:.3f}, max {ratios['max']:.3f})",
        target,
    )


# model -> steps per block of benchmarks/ddp_one_rank.py (a block lasts 1-3 s here)
ONE_RANK_STEPS = {"mnist": 30, "gpt-tiny": 60, "resnet18-64px": 15}
ONE_RANK_VARIANTS = ("bare", "ddp", "ddp-bucket-view")
HOW = {"ddp": "as tutorials wrap it", "ddp-bucket-view": "with gradient_as_bucket_view"}


def _one_rank(model: str, variant: str) -> float:
    """Median steps/s of three blocks of one variant, in a process of its own."""
    command = [
        PYTHON, str(HERE / "ddp_one_rank.py"), model, "--variants", variant,
        "--blocks", "3", "--steps", str(ONE_RANK_STEPS[model]),
    ]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, check=True)
    rates: dict[str, list[float]] = json.loads(proc.stdout.splitlines()[-1])["steps_per_s"]
    return statistics.median(rates[variant])


def _ddp_one_rank(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    record: dict[str, Any] = {}
    for model in ONE_RANK_STEPS:
        rounds = interleaved(
            {v: functools.partial(_one_rank, model, v) for v in ONE_RANK_VARIANTS},
            repeats,
            f"{model} DDP on one rank",
        )
        record[model] = rounds
        bare = spread([r["bare"] for r in rounds])["median"]
        for variant, how in HOW.items():
            rows.append(
                _ratio_row(
                    f"{model}: torch DDP on 1 rank ({how}) / bare model, steps/s "
                    f"({repeats} rounds; bare {bare:.1f} steps/s)",
                    rounds,
                    variant,
                    "bare",
                    "",
                )
            )
    return rows, record


def run(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    record: dict[str, Any] = {}
    one_rank_rows, record["ddp_one_rank"] = _ddp_one_rank(repeats)
    rows += one_rank_rows
    for model, spec in MODELS.items():
        per_rank = ("--batch-size", spec["batch"])
        scaling = interleaved(
            {
                "1 rank": functools.partial(_samples_per_s, model, [], per_rank),
                "2 ranks": functools.partial(
                    _samples_per_s, model, ["--nproc-per-node", "2"], per_rank
                ),
            },
            repeats,
            f"{model} weak scaling",
        )
        efficiency = spread([r["2 ranks"] / (2 * r["1 rank"]) for r in scaling])
        rows.append(
            (
                f"{model}: weak-scaling efficiency, 2 local ranks vs 1 over gloo (batch "
                f"{spec['batch']} per rank, {repeats} rounds)",
                f"median {efficiency['median']:.2f} (min {efficiency['min']:.2f}, max "
                f"{efficiency['max']:.2f}); samples/s 1 rank "
                f"{spread([r['1 rank'] for r in scaling])['median']:.0f}, 2 ranks "
                f"{spread([r['2 ranks'] for r in scaling])['median']:.0f}",
                "",
            )
        )
        record[model] = {"weak_scaling": scaling}

    spec = MODELS[STRATEGY_MODEL]
    global_batch = ("--global-batch-size", 2 * spec["batch"])
    two = ["--nproc-per-node", "2"]
    strategies = interleaved(
        {
            name: functools.partial(_samples_per_s, STRATEGY_MODEL, [*args, *two], global_batch)
            for name, args in STRATEGIES.items()
        },
        repeats,
        "strategies",
    )
    for name in STRATEGIES:
        if name == "ddp":
            continue
        rows.append(
            _ratio_row(
                f"{STRATEGY_MODEL}: {name} / DDP steps/s, 2 local ranks, global batch "
                f"{global_batch[1]} ({repeats} rounds)",
                strategies,
                name,
                "ddp",
                "",
            )
        )
    record["strategies"] = {"model": STRATEGY_MODEL, "rounds": strategies}
    return rows, record
