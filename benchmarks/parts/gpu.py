"""The GPU part: skipped with a line in the table when no CUDA device is visible."""

from __future__ import annotations

import subprocess
from typing import Any

from parts.common import PYTHON, Row


def run() -> tuple[list[Row], dict[str, Any]]:
    probe = subprocess.run(
        [PYTHON, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        check=True,
    )
    if probe.stdout.strip() != "True":
        reason = "no CUDA device visible (torch.cuda.is_available() is False)"
        row = ("GPU part (MNIST 5 epochs, ResNet-50 img/s, GPT-124M MFU, NCCL bus bw)",
               f"skipped: {reason}", "run `nox -s bench` on a GPU machine")  # fmt: skip
        return [row], {"skipped": reason}
    row = ("GPU part", "CUDA present, but the GPU benchmarks are not written yet", "")
    return [row], {"skipped": "not implemented"}
