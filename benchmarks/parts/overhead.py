"""What distribution costs, measured with ddpimg's own trainers (steps/s after warm-up):

* DDP on one rank against the bare model (``--strategy none``): DDP's hooks, bucketing and
  the all-reduce of a world of one.
* Two local ranks against one at the same per-rank batch (weak scaling over gloo):
  efficiency = samples/s of 2 ranks / (2 x samples/s of 1 rank). On a machine with as
  many cores as ranks, one rank alone already uses every core (intra-op threads), so the
  ideal is not 1.0 there: the figure says what gloo's all-reduce and the split of the
  cores cost together.
* DeepSpeed ZeRO 0/1/2/3 and FSDP against DDP: two local ranks, the same global batch.

Every comparison runs in rounds, each configuration once per round in a shuffled order;
ratios are taken within a round.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from parts.common import Row, interleaved, run_train, spread

MODELS: dict[str, dict[str, Any]] = {
    "mnist": {"train": ["mnist"], "batch": 64, "steps": 30, "warmup": 5, "samples": 6400},
    "gpt-tiny": {
        "train": ["gpt", "--size", "tiny"],
        "batch": 32,
        "steps": 40,
        "warmup": 10,
        "samples": 4000,
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


def run(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    record: dict[str, Any] = {}
    for model, spec in MODELS.items():
        per_rank = ("--batch-size", spec["batch"])
        ddp_vs_none = interleaved(
            {
                "ddp": functools.partial(_samples_per_s, model, STRATEGIES["ddp"], per_rank),
                "none": functools.partial(_samples_per_s, model, ["--strategy", "none"], per_rank),
            },
            repeats,
            f"{model} ddp vs none",
        )
        rows.append(
            _ratio_row(
                f"{model}: DDP on 1 rank / bare model (`--strategy none`), steps/s "
                f"({repeats} rounds)",
                ddp_vs_none,
                "ddp",
                "none",
                "~1.0x (no overhead)",
            )
        )
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
        record[model] = {"ddp_vs_none": ddp_vs_none, "weak_scaling": scaling}

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
