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


def import_report(out: Path, *arguments: str) -> list[tuple[int, str]]:
    """``-X importtime``'s report of ``train ARGUMENTS``: (depth, module) in its order, each
    module after those its import imported (depth + 1), depth 0 imported when a function ran.
    PYTHONPROFILEIMPORTTIME carries the report through the module-free re-exec, which drops
    ``-X`` options."""
    env = os.environ | {"PYTHONPROFILEIMPORTTIME": "1", "MASTER_PORT": str(free_port())}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ddpimg", "train", *arguments, *ONE_STEP,
         "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    names = [line.rsplit("|", 1)[-1] for line in lines[1:]]  # the first is the header
    report = [((len(name) - len(name.lstrip()) - 1) // 2, name.strip()) for name in names]
    # The checks below would pass on an empty report if importtime's format changed.
    assert {"torch", "ddpimg.train.loop"} <= {name for _, name in report}
    return report


def imported_by_train(out: Path, *arguments: str) -> set[str]:
    """The modules ``train ARGUMENTS`` imported."""
    return {name for _, name in import_report(out, *arguments)}


def importers(report: list[tuple[int, str]], module: str) -> list[str]:
    """The modules whose import imported ``module``, innermost first (none: a function's
    import at run time)."""
    index = next(i for i, (_, name) in enumerate(report) if name == module)
    depth, chain = report[index][0], []
    for later_depth, name in report[index + 1 :]:
        if later_depth < depth:
            chain.append(name)
            depth = later_depth
    return chain


def under(imported: set[str], package: str) -> list[str]:
    return sorted(name for name in imported if name == package or name.startswith(f"{package}."))


def test_a_ddp_mnist_run_imports_no_other_strategy_tracker_or_trainer(tmp_path: Path) -> None:
    """And torch._dynamo (about a second on two cores) only when torch's optimizer is built
    (its add_param_group imports it): no module of ddpimg imports it when it is imported
    (the dropout layers did, through torch.compiler.disable, until issue 56)."""
    report = import_report(tmp_path / "run", "mnist")
    imported = {name for _, name in report}
    found = {package: under(imported, package) for package in NOT_FOR_A_DDP_RUN}
    assert {package: names[:3] for package, names in found.items() if names} == {}
    assert importers(report, "torch._dynamo") == []


@pytest.mark.deepspeed
def test_a_deepspeed_run_imports_deepspeed(tmp_path: Path) -> None:
    imported = imported_by_train(tmp_path / "run", "toy", "--strategy", "deepspeed")
    assert "deepspeed" in imported
    assert not under(imported, "torchvision")
