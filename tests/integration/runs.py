"""Helpers for integration tests: run ddpimg under a real launcher and read what it wrote."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ddpimg.train.startup import PHASES
from tests.noise import FLOAT32_STEP, Tolerance, assert_within

PYTHON = sys.executable
BIN = Path(PYTHON).parent

# Small but real: 8 optimizer steps of the MNIST CNN on synthetic data, every step logged, at
# a tenth of the trainer's default learning rate: Adadelta at 1.0 makes these 8 steps chaotic
# (the loss rises at step 2), and 4 ranks then part from one process by 336x the floor below
# at step 6 (per-row dropout masks, 2026-11-29), 0.3 by 392x; at 0.1 the loss falls smoothly.
QUICK_LR = "0.1"
QUICK_TRAIN = [
    "--data", "synthetic", "--epochs", "1", "--max-steps", "8", "--log-every", "1",
    "--global-batch-size", "64", "--train-samples", "2048", "--eval-samples", "512",
    "--seed", "7", "--lr", QUICK_LR,
]  # fmt: skip

# QUICK_TRAIN's trajectory against one process's, under any launcher and strategy (python
# -m tests.noise --compare "2 ranks=" --compare "4 ranks=--nproc-per-node 4" -- QUICK_TRAIN,
# AMD EPYC, 2026-12-07, the dropout masks hashed per unit): 1 thread, torch's default
# kernels, oneDNN at SSE4.1 and MKL's compatible path parted from the reference by at most
# 1.5e-8 at steps 1-2, under one float32 step: the floor is that step, 1.2e-7. Over the 8
# steps 2 and 4 ranks, natively and on each of those kernels against one process on the same
# kernels, parted by at most 1.5e-8, 0.13x the floor (torch's default kernels against the
# native ones, which no test compares: 1.69x). The multiple, 10, is 77x the most a test
# compares and 6x that variant's own growth.
QUICK_TOLERANCE = Tolerance(floor=FLOAT32_STEP, multiple=10, steps=8)


# Ctrl-C's SIGINT must reach a command a test interrupts: a test session started in the
# background (``cmd &`` in a non-interactive shell) hands its children SIGINT ignored, which
# exec keeps; this resets it to the default, then execs the command (the same process).
_DEFAULT_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def with_default_sigint(argv: Sequence[str]) -> list[str]:
    """``argv`` started with SIGINT's default action, however the tests were started."""
    return [PYTHON, "-c", _DEFAULT_SIGINT, *argv]


def command(name: str) -> str:
    """A console script of the environment running the tests (train, ddpimg, torchrun)."""
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed next to {PYTHON} nor on PATH")
    return found


# Where runs started without a ``cwd`` work: one fresh directory each. A run's defaults
# land in its working directory (without ``--out``, ``train`` writes under ``runs/`` there),
# and a run must never find another test's run in it, nor write into the checkout the tests
# run from.
_scratch: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def scratch_directories(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's root of fresh working directories (``fresh_cwd``)."""
    _scratch.append(tmp_path_factory.mktemp("cwd"))
    yield _scratch[-1]
    _scratch.pop()


@pytest.fixture(scope="module", autouse=True)
def module_cwd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Module fixtures' processes start in a directory of the module's own."""
    yield from _inside(tmp_path_factory.mktemp("module-cwd"))


@pytest.fixture(autouse=True)
def test_cwd(tmp_path: Path) -> Iterator[Path]:
    """A test's processes (run or Popen alike) start in its own tmp_path."""
    yield from _inside(tmp_path)


def _inside(directory: Path) -> Iterator[Path]:
    before = os.getcwd()
    os.chdir(directory)
    try:
        yield directory
    finally:
        os.chdir(before)


def fresh_cwd() -> Path:
    """A new, empty working directory for one run."""
    return Path(tempfile.mkdtemp(prefix="run-", dir=_scratch[-1] if _scratch else None))


def run(
    cmd: Sequence[str],
    env: Mapping[str, str],
    timeout: float = 300,
    check: bool = True,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run and, with ``check``, fail with the tails of both streams when the exit is non-zero.
    Without ``cwd`` the run starts in a fresh directory (``fresh_cwd``)."""
    proc = subprocess.run(
        list(cmd),
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or fresh_cwd(),
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


def free_port() -> int:
    """A TCP port free on the loopback right now, for launchers that take one
    (torch.distributed.launch, deepspeed, torchrun's c10d endpoint)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check_run(
    out: Path,
    reference: list[float],
    world_size: int,
    tolerance: Tolerance = QUICK_TOLERANCE,
) -> None:
    """A completed run of ``world_size`` ranks whose losses fall and match ``reference``."""
    losses = train_losses(out)
    assert summary(out)["world_size"] == world_size
    assert losses[-1] < losses[0], f"loss did not go down: {losses}"
    assert any(m["kind"] == "eval" for m in read_metrics(out))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    check_startup(manifest["startup"])
    assert_within(losses, reference, tolerance, f"{out.name} vs one process")


def check_startup(report: dict[str, Any]) -> None:
    """Rank 0 timed every phase up to its first step, whichever launcher started it."""
    phases = [report[f"{phase}_s"] for phase in PHASES]
    assert all(isinstance(s, float) and s >= 0 for s in phases), report
    assert sum(phases) == pytest.approx(report["total_s"], abs=1e-3)
    assert set(report["marks"]) == set(PHASES)


def run_info(out: Path) -> dict[str, Any]:
    """What rank 0 resolved (manifest.json's run_info: source, master, backend, ...)."""
    info: dict[str, Any] = json.loads((out / "manifest.json").read_text())["run_info"]
    return info
