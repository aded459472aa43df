"""What ``--log-to tensorboard,wandb,mlflow`` costs the training loop: mnist on two local
ranks (``--nproc-per-node 2``, Gloo), steady steps/s with all three trackers (W&B offline,
MLflow's file store under --out) against the same run without, at the default
``--log-every 10`` (the target: under 2% slower) and at ``--log-every 1`` (a record every
step: the worst case). Rank 0 hands each record to the trackers' own thread, so what the
loop pays is the enqueue plus the thread's share of the cores. Each round runs both sides
once in a shuffled order; the ratio is taken within the round.
"""

from __future__ import annotations

import functools
from typing import Any

from parts.common import Row, interleaved, run_train, spread

TRAIN = [
    "mnist", "--nproc-per-node", "2", "--batch-size", "64", "--train-samples", "19200",
    "--eval-samples", "64",
]  # fmt: skip
STEPS, WARMUP = 150, 20
LOG_TO = ["--log-to", "tensorboard,wandb,mlflow"]
# Nothing leaves the machine: W&B offline, no telemetry from MLflow or W&B.
OFFLINE = {
    "WANDB_MODE": "offline",
    "WANDB_ERROR_REPORTING": "false",
    "WANDB_SILENT": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
}
TARGET = 0.98


def _steps_per_s(trackers: bool, log_every: int) -> float:
    run = run_train(
        [*TRAIN, *(LOG_TO if trackers else [])],
        steps=STEPS,
        warmup=WARMUP,
        extra_env=OFFLINE,
        log_every=log_every,
    )
    return run.steady_steps_per_s


def run(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    record: dict[str, Any] = {}
    for log_every in (10, 1):
        rounds = interleaved(
            {
                "trackers": functools.partial(_steps_per_s, True, log_every),
                "none": functools.partial(_steps_per_s, False, log_every),
            },
            repeats,
            f"trackers, --log-every {log_every}",
        )
        ratio = spread([r["trackers"] / r["none"] for r in rounds])
        steps = spread([r["none"] for r in rounds])["median"]
        rows.append(
            (
                f"trackers: mnist, 2 local ranks, --log-every {log_every}, steps/s with "
                f"--log-to tensorboard,wandb,mlflow / without ({repeats} rounds; without "
                f"{steps:.1f} steps/s)",
                f"median {ratio['median']:.3f}x (min {ratio['min']:.3f}, max {ratio['max']:.3f})",
                f">= {TARGET:.2f}x" if log_every == 10 else "worst case: a record every step",
            )
        )
        record[f"log_every_{log_every}"] = rounds
    return rows, record
