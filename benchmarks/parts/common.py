"""What the benchmark parts share: the table row, the interpreter, medians, a free port, and
a ddpimg ``train`` run that returns its metrics and manifest."""

from __future__ import annotations

import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

HERE = Path(__file__).resolve().parent.parent
REFERENCE = HERE / "reference"
PYTHON = sys.executable

Row = tuple[str, str, str]  # what, result, target / note
T = TypeVar("T")


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class TrainRun:
    """One finished ``train``: its metrics lines, manifest, and times seen from outside."""

    metrics: list[dict[str, Any]]
    manifest: dict[str, Any]
    spawned: float  # time.time() just before the process was started
    wall_s: float

    @property
    def summary(self) -> dict[str, Any]:
        return next(line for line in self.metrics if line["kind"] == "summary")

    @property
    def steady_steps_per_s(self) -> float:
        summary = self.summary
        return float(summary["steady_samples_per_s"]) / float(summary["global_batch_size"])

    def loss_at(self, step: int) -> float:
        line = next(m for m in self.metrics if m["kind"] == "train" and m["step"] == step)
        return float(line["loss"])


def timeout_until(deadline: float | None) -> float | None:
    """Seconds from now to ``deadline`` (a ``time.monotonic()`` reading), at least one."""
    return None if deadline is None else max(1.0, deadline - time.monotonic())


def run_train(
    arguments: Sequence[str],
    *,
    steps: int,
    warmup: int,
    epochs: int = 1,
    deadline: float | None = None,
    extra_env: Mapping[str, str] | None = None,
    log_every: int | None = None,
) -> TrainRun:
    """``python -m ddpimg train ARGUMENTS`` for ``steps`` steps (``epochs`` at most, no
    resume, logged every ``log_every`` steps, by default at the last step only) in a fresh
    output directory, with ``extra_env`` added to this process's environment; killed at
    ``deadline`` (``time.monotonic()``), if given."""
    with tempfile.TemporaryDirectory(prefix="ddpimg-bench-") as out:
        command = [
            PYTHON, "-m", "ddpimg", "train", *arguments, "--epochs", str(epochs),
            "--max-steps", str(steps), "--warmup-steps", str(warmup),
            "--log-every", str(log_every or steps), "--out", out, "--resume", "none",
        ]  # fmt: skip
        # A port of its own, so that a run still closing its sockets does not collide.
        env = dict(os.environ, MASTER_PORT=str(free_port())) | dict(extra_env or {})
        spawned = time.time()
        began = time.perf_counter()
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=timeout_until(deadline),
        )
        wall = time.perf_counter() - began
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
            )
        metrics = [json.loads(line) for line in Path(out, "metrics.jsonl").read_text().splitlines()]
        manifest = json.loads(Path(out, "manifest.json").read_text())
    return TrainRun(metrics, manifest, spawned, wall)


def interleaved(
    runners: Mapping[str, Callable[[], T]], repeats: int, label: str, seed: int = 0
) -> list[dict[str, T]]:
    """Each repeat runs every runner once, in an order shuffled per repeat (seeded, so a
    rerun uses the same orders). A fixed alternation can fall in step with a periodic load on
    a shared machine and put one side in its slow phase every time; a shuffled order cannot."""
    rng = random.Random(seed)
    rounds: list[dict[str, T]] = []
    for repeat in range(repeats):
        order = list(runners)
        rng.shuffle(order)
        results = {name: runners[name]() for name in order}
        rounds.append(results)
        log(f"{label} round {repeat + 1}/{repeats} ({' then '.join(order)}): {results}")
    return rounds


def peak_rss_kib(command: list[str]) -> tuple[dict[str, Any], int]:
    """Run ``command`` and read its peak resident set from ``wait4`` (per child)."""
    env = dict(os.environ, MASTER_PORT=str(free_port()))
    with open(os.devnull, "wb") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.PIPE)
        assert process.stderr is not None
        err = process.stderr.read()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} exited {process.returncode}:\n{err.decode()[-3000:]}"
        )
    out_dir = Path(command[command.index("--out") + 1])
    lines = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    summary = next(line for line in lines if line["kind"] == "summary")
    return summary, int(usage.ru_maxrss)
