"""What a ``train`` run imports: only what it uses (docs/benchmarks.md, "What a run
imports, and when"). Each case is one real run of one process and one step, read through
``-X importtime`` (every module the process imported, once, in its stderr)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

# Packages a plain DDP run of the MNIST trainer must not import: another strategy's framework,
# the trackers' packages (no --log-to), the plotting library, another trainer's libraries,
# and torch's distributed checkpoint (FSDP's checkpoints only).
NOT_FOR_A_DDP_RUN = (
    "deepspeed",
    "tensorboard",
    "torch.utils.tensorboard",
    "mlflow",
    "wandb",
    "matplotlib",
    "transformers",
    "safetensors",
    "torchvision",
    "torch.distributed.checkpoint",
)
ONE_STEP = [
    "--data", "synthetic", "--max-steps", "1", "--batch-size", "16", "--train-samples", "64",
    "--eval-samples", "16", "--resume", "none",
]  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def imported_by_train(out: Path, *arguments: str) -> set[str]:
    """The modules ``train ARGUMENTS`` imported. PYTHONPROFILEIMPORTTIME carries the
    report through the module-free re-exec, which drops ``-X`` options."""
    env = os.environ | {"PYTHONPROFILEIMPORTTIME": "1", "MASTER_PORT": str(free_port())}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ddpimg", "train", *arguments, *ONE_STEP,
         "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    imported = {line.rsplit("|", 1)[-1].strip() for line in lines}
    # The checks below would pass on an empty report if importtime's format changed.
    assert {"torch", "ddpimg.train.loop"} <= imported
    return imported


def under(imported: set[str], package: str) -> list[str]:
    return sorted(name for name in imported if name == package or name.startswith(f"{package}."))


def test_a_ddp_mnist_run_imports_no_other_strategy_tracker_or_trainer(tmp_path: Path) -> None:
    imported = imported_by_train(tmp_path / "run", "mnist")
    found = {package: under(imported, package) for package in NOT_FOR_A_DDP_RUN}
    assert {package: names[:3] for package, names in found.items() if names} == {}


@pytest.mark.deepspeed
def test_a_deepspeed_run_imports_deepspeed(tmp_path: Path) -> None:
    imported = imported_by_train(tmp_path / "run", "toy", "--strategy", "deepspeed")
    assert "deepspeed" in imported
    assert not under(imported, "torchvision")
