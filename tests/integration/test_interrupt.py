"""Ctrl-C keeps the contract: every process exits with status 130, manifest.json says
"interrupted" with the same 130, and the terminal gets a few lines, not a traceback per
rank.

Ctrl-C is SIGINT to the terminal's foreground process group: the test starts the command
in a session of its own and signals that group, once the run has logged its first steps.
Under srun the group holds srun alone (slurmstepd starts the ranks): with ``-X``
(``--disable-status``) srun forwards that one SIGINT to every task (srun(1)); without it,
the first Ctrl-C only prints the tasks' state and the second kills them
(docs/checkpoints-and-failures.md, exit 130).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.runs import command

RUN = [
    "--data", "synthetic", "--epochs", "1", "--max-steps", "400", "--global-batch-size", "64",
    "--train-samples", "60000", "--log-every", "1",
]  # fmt: skip
# Hang guards: a step takes about 0.1 s here, a start under torchrun about 10 s.
START_GUARD_S = 120.0
EXIT_GUARD_S = 120.0
MAX_LINES = 8


def interrupt(argv: list[str], env: dict[str, str], out: Path) -> tuple[int, str]:
    """Start ``argv`` as a terminal's foreground job, press Ctrl-C once two steps are
    logged under ``out``; its exit status and standard error."""
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + START_GUARD_S
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"hang guard: no two steps logged within {START_GUARD_S:.0f} s")
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, stderr = proc.communicate(timeout=EXIT_GUARD_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"hang guard: still running {EXIT_GUARD_S:.0f} s after Ctrl-C")
    return proc.returncode, stderr


def assert_interrupted(returncode: int, stderr: str, out: Path, processes: int) -> None:
    assert returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if not line.startswith("train epoch")]
    assert len(lines) <= MAX_LINES, stderr
    said = [line for line in lines if "ddpimg: interrupted (Ctrl-C); exit status 130" in line]
    assert 1 <= len(said) <= processes, stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["status"], manifest["exit_status"]) == ("interrupted", 130)


@pytest.mark.torchrun
@pytest.mark.parametrize("launcher", [[], ["--nproc-per-node", "2"]], ids=["plain", "nproc"])
def test_ctrl_c_exits_130_as_the_manifest_says(
    tmp_path: Path, run_env: dict[str, str], launcher: list[str]
) -> None:
    out = tmp_path / "run"
    returncode, stderr = interrupt(
        [command("train"), *RUN, *launcher, "--out", str(out)], run_env, out
    )
    assert_interrupted(returncode, stderr, out, processes=2 if launcher else 1)


@pytest.mark.slurm
def test_ctrl_c_under_srun_with_disable_status_exits_130(
    tmp_path: Path, slurm_env: dict[str, str]
) -> None:
    out = tmp_path / "run"
    argv = ["srun", "-X", "--ntasks", "2", command("train"), *RUN, "--out", str(out)]
    returncode, stderr = interrupt(argv, slurm_env, out)
    assert_interrupted(returncode, stderr, out, processes=2)
