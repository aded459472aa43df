"""Helpers for integration tests: run ddpimg under a real launcher and read what it wrote."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PYTHON = sys.executable
BIN = Path(PYTHON).parent

# Small but real: 8 optimizer steps of the MNIST CNN on synthetic data, every step logged.
QUICK_TRAIN = [
    "--data", "synthetic", "--epochs", "1", "--max-steps", "8", "--log-every", "1",
    "--global-batch-size", "64", "--train-samples", "2048", "--eval-samples", "512",
    "--seed", "7",
]  # fmt: skip


def command(name: str) -> str:
    """A console script of the environment running the tests (train, ddpimg, torchrun)."""
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed next to {PYTHON} nor on PATH")
    return found


def run(
    cmd: Sequence[str],
    env: Mapping[str, str],
    timeout: float = 300,
    check: bool = True,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run and, with ``check``, fail with the tails of both streams when the exit is non-zero."""
    proc = subprocess.run(
        list(cmd),
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n"
            f"--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc


def read_metrics(out: Path) -> list[dict[str, Any]]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def train_losses(out: Path) -> list[float]:
    return [m["loss"] for m in read_metrics(out) if m["kind"] == "train"]


def summary(out: Path) -> dict[str, Any]:
    rows = [m for m in read_metrics(out) if m["kind"] == "summary"]
    assert len(rows) == 1, f"expected one summary line in {out}/metrics.jsonl, got {len(rows)}"
    return rows[0]


def assert_close(actual: list[float], expected: list[float], rel: float, what: str) -> None:
    assert len(actual) == len(expected), f"{what}: {len(actual)} steps vs {len(expected)}"
    for step, (a, e) in enumerate(zip(actual, expected, strict=True), start=1):
        assert math.isclose(a, e, rel_tol=rel), f"{what}: step {step}: {a!r} vs {e!r} (rel {rel})"
