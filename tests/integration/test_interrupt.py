"""Ctrl-C keeps the contract: every process exits with status 130, manifest.json says
"interrupted" with the same 130, and the terminal gets a few lines, not a traceback per
rank; without ``--out``, the same command given again continues the run in its directory.

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

from tests.integration.runs import command, with_default_sigint

RUN = [
    "--data", "synthetic", "--epochs", "1", "--max-steps", "400", "--global-batch-size", "64",
    "--train-samples", "60000", "--log-every", "1",
]  # fmt: skip
# Hang guards: a step takes about 0.1 s here, a start under torchrun about 10 s.
START_GUARD_S = 120.0
EXIT_GUARD_S = 120.0
MAX_LINES = 8


def interrupt(argv: list[str], env: dict[str, str], out: Path, lines: int = 2) -> tuple[int, str]:
    """Start ``argv`` as a terminal's foreground job, press Ctrl-C once ``lines`` lines are
    logged in ``out``'s metrics.jsonl; its exit status and standard error."""
    proc = subprocess.Popen(
        with_default_sigint(argv),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + START_GUARD_S
    while not (metrics.exists() and metrics.read_text().count("\n") >= lines):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"hang guard: no {lines} lines logged within {START_GUARD_S:.0f} s")
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
def test_ctrl_c_under_the_nproc_launcher_exits_130_as_the_manifest_says(
    tmp_path: Path, run_env: dict[str, str]
) -> None:
    out = tmp_path / "run"
    argv = [command("train"), *RUN, "--nproc-per-node", "2", "--out", str(out)]
    returncode, stderr = interrupt(argv, run_env, out)
    assert_interrupted(returncode, stderr, out, processes=2)


def test_after_ctrl_c_the_same_command_continues_its_run(
    tmp_path: Path, run_env: dict[str, str]
) -> None:
    """One process without --out: Ctrl-C, then the same command again continues the run in
    its directory from its newest checkpoint (and is stopped the same way once it has gone
    past where the first stopped: the continuation, not the end, is the claim)."""
    argv = [command("train"), *RUN, "--checkpoint-every", "2"]
    latest = tmp_path / "runs" / "latest"
    returncode, stderr = interrupt(argv, run_env, latest, lines=5)
    assert_interrupted(returncode, stderr, latest, processes=1)
    run = latest.resolve()
    first = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    stopped_at = first[-1]["step"]

    returncode, stderr = interrupt(argv, run_env, latest, lines=len(first) + 2)
    assert_interrupted(returncode, stderr, latest, processes=1)
    said = [line for line in stderr.splitlines() if line.startswith("ddpimg: ")]
    assert said[0] == (
        f"ddpimg: continuing runs/{run.name}, the newest run of these options (interrupted at "
        f"step {stopped_at}); --resume none starts a new one"
    )
    resumed = json.loads((run / "manifest.json").read_text())["resumed_from"]
    assert resumed["checkpoint"] == f"runs/{run.name}/checkpoints/step-{resumed['step']:08d}"
    assert 4 <= resumed["step"] <= stopped_at  # step 4's checkpoint was there before line 5
    assert (
        said[1]
        == f"ddpimg: resuming from {resumed['checkpoint']} (epoch 1, step {resumed['step']})"
    )
    assert sorted(path.name for path in (tmp_path / "runs").iterdir()) == ["latest", run.name]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1))  # one trajectory, no step twice
    assert steps[-1] > stopped_at


@pytest.mark.slurm
def test_ctrl_c_under_srun_with_disable_status_exits_130(
    tmp_path: Path, slurm_env: dict[str, str]
) -> None:
    out = tmp_path / "run"
    argv = ["srun", "-X", "--ntasks", "2", command("train"), *RUN, "--out", str(out)]
    returncode, stderr = interrupt(argv, slurm_env, out)
    assert_interrupted(returncode, stderr, out, processes=2)
