"""``ddpimg env --json`` against ``python -c pass`` (interleaved medians), and whether
``ddpimg env`` imports torch."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from parts.common import PYTHON, Row

TORCH_PROBE = (
    "import sys\n"
    "from ddpimg.cli import main\n"
    "sys.stdout = open('/dev/null', 'w')\n"
    "main(['env', '--json'])\n"
    "sys.stderr.write('torch' in sys.modules and 'TORCH' or 'NOTORCH')\n"
)


def _time_command(command: Sequence[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - began


def run(count: int) -> tuple[list[Row], dict[str, Any]]:
    ddpimg = str(Path(PYTHON).parent / "ddpimg")
    commands = {
        "python -c pass": [PYTHON, "-c", "pass"],
        "ddpimg env --json": [ddpimg, "env", "--json"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for command in commands.values():
        _time_command(command)  # warm the page cache
    for _ in range(count):
        for name, command in commands.items():
            times[name].append(_time_command(command))
    probe = subprocess.run([PYTHON, "-c", TORCH_PROBE], capture_output=True, text=True, check=True)
    imports_torch = probe.stderr.strip().endswith("TORCH") and "NOTORCH" not in probe.stderr
    base = statistics.median(times["python -c pass"])
    env = statistics.median(times["ddpimg env --json"])
    rows: list[Row] = [
        (
            f"`ddpimg env --json` vs `python -c pass` (median of {count}, interleaved)",
            f"{env * 1e3:.0f} ms vs {base * 1e3:.0f} ms = {env / base:.2f}x",
            "< 3x",
        ),
        ("`ddpimg env` imports torch", "yes" if imports_torch else "no", "no"),
    ]
    record = {
        "times_s": times,
        "median_s": {"python -c pass": base, "ddpimg env --json": env},
        "ratio": env / base,
        "imports_torch": imports_torch,
    }
    return rows, record
