"""ddpimg's trainers against the tutorial-style loops in benchmarks/reference/.

``train mnist``, ``train gpt --size tiny`` and ``train resnet --arch resnet18 --image-size
64`` against the reference scripts, one process each, with the same model, data order,
per-rank batch, precision and optimiser. Each pair runs in a shuffled order, so both see the same
machine load; the ratio of training steps/s after warm-up is taken per pair, and the loss
after the last step K is compared.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from parts.common import PYTHON, REFERENCE, Row, free_port, interleaved, run_train, spread

# Per model: ddpimg's train arguments and the reference script; both get the same batch,
# step count, warm-up and sample counts.
AB_MODELS: dict[str, dict[str, Any]] = {
    # Steps are chosen so that the measured part (after warm-up) lasts several seconds on
    # an idle 2-core machine: shorter windows are dominated by scheduling noise.
    "mnist": {
        "train": ["mnist"],
        "script": "mnist_ddp.py",
        "batch": 64,
        "steps": 200,
        "warmup": 20,
        "train_samples": 12800,
        "eval_samples": 1000,
    },
    "gpt-tiny": {
        "train": ["gpt", "--size", "tiny"],
        "script": "gpt_ddp.py",
        "batch": 32,
        "steps": 300,
        "warmup": 30,
        "train_samples": 9600,
        "eval_samples": 500,
    },
    "resnet18-64px": {
        "train": ["resnet", "--arch", "resnet18", "--image-size", "64"],
        "script": "resnet_ddp.py",
        "reference_args": ["--arch", "resnet18", "--image-size", "64"],
        "batch": 16,
        "steps": 40,
        "warmup": 5,
        "train_samples": 640,
        "eval_samples": 256,
    },
}


def _run_ddpimg(spec: dict[str, Any]) -> dict[str, float]:
    run = run_train(
        [
            *spec["train"], "--batch-size", str(spec["batch"]),
            "--train-samples", str(spec["train_samples"]),
            "--eval-samples", str(spec["eval_samples"]),
        ],
        steps=spec["steps"],
        warmup=spec["warmup"],
    )  # fmt: skip
    return {
        "steps_per_s": run.steady_steps_per_s,
        "loss_at_k": run.loss_at(spec["steps"]),
        "eval_loss": float(run.summary["eval_loss"]),
        "wall_s": run.wall_s,
    }


def _run_reference(spec: dict[str, Any]) -> dict[str, float]:
    command = [
        PYTHON, str(REFERENCE / spec["script"]), *spec.get("reference_args", []),
        "--max-steps", str(spec["steps"]), "--warmup-steps", str(spec["warmup"]),
        "--batch-size", str(spec["batch"]), "--train-samples", str(spec["train_samples"]),
        "--eval-samples", str(spec["eval_samples"]),
    ]  # fmt: skip
    env = dict(os.environ, MASTER_PORT=str(free_port()))
    began = time.perf_counter()
    proc = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - began
    result_line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    result: dict[str, float] = json.loads(result_line.removeprefix("RESULT "))
    return result | {"wall_s": wall}


def run(repeats: int, models: Sequence[str]) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    record: dict[str, Any] = {}
    for name in models:
        spec = AB_MODELS[name]
        runs = interleaved(
            {
                "ddpimg": functools.partial(_run_ddpimg, spec),
                "reference": functools.partial(_run_reference, spec),
            },
            repeats,
            name,
        )
        ratio = [r["ddpimg"]["steps_per_s"] / r["reference"]["steps_per_s"] for r in runs]
        wall = [r["reference"]["wall_s"] / r["ddpimg"]["wall_s"] for r in runs]
        loss_a = runs[0]["ddpimg"]["loss_at_k"]
        loss_b = runs[0]["reference"]["loss_at_k"]
        record[name] = {
            "spec": {k: v for k, v in spec.items() if k != "train"},
            "runs": runs,
            "steps_per_s_ratio": spread(ratio),
            "wall_ratio_reference_over_ddpimg": spread(wall),
        }
        ratios = spread(ratio)
        steps_a = statistics.median(r["ddpimg"]["steps_per_s"] for r in runs)
        steps_b = statistics.median(r["reference"]["steps_per_s"] for r in runs)
        rows.append(
            (
                f"{name}: steps/s ddpimg / reference (batch {spec['batch']}, "
                f"{spec['steps']} steps, {spec['warmup']} warm-up, {repeats} pairs)",
                f"median {ratios['median']:.2f}x (min {ratios['min']:.2f}, max "
                f"{ratios['max']:.2f}); {steps_a:.2f} vs {steps_b:.2f} steps/s",
                ">= 1.0x",
            )
        )
        rows.append(
            (
                f"{name}: loss at step {spec['steps']}, ddpimg / reference",
                f"{loss_a:.6f} / {loss_b:.6f} (diff {abs(loss_a - loss_b):.1e})",
                "agree",
            )
        )
        rows.append(
            (
                f"{name}: whole run wall time, reference / ddpimg (start, train, eval)",
                f"median {spread(wall)['median']:.2f}x",
                "",
            )
        )
    return rows, record
