"""What the tests of users' scripts under ``train --script`` share: the three scripts (a
Hugging Face Trainer script in the shape of run_clm.py, a Lightning script, a plain DDP loop
with ddpimg's three lines), the three launchers, and the steps of a run the tests interrupt.

Each script takes an output directory (its ``rank<N>.json`` reports, and for Hugging Face
and Lightning their checkpoints) and creates ``step-<N>`` there once rank 0 has done N
optimizer steps: the tests signal after that marker. ``ddpimg``'s own run directory
(``--out``) is another directory, as a user's would be.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.runs import command

SCRIPTS_DIR = Path(__file__).parent / "scripts"
# Steps of a run; the signal comes after MARKER steps, and the ranks agree to stop at the
# next multiple of CHECK_EVERY (``--preempt-check-every``).
STEPS = 24
MARKER = 4
CHECK_EVERY = 4
STEP_SLEEP_S = 0.25
TIMEOUT_S = 10
WAIT_S = 300
TAG = "DDPIMG_TEST_RUN"


@dataclass(frozen=True)
class Script:
    """How to run one of the scripts and read what its ranks reported."""

    name: str
    args: Callable[[Path, Path, bool], list[str]]  # (data, output dir, slowed) -> FILE ARGS

    def losses(self, output: Path, rank: int = 0) -> dict[int, float]:
        report = json.loads((output / f"rank{rank}.json").read_text())
        return {int(step): float(loss) for step, loss in report["losses"].items()}

    def checksum(self, output: Path, rank: int) -> float:
        return float(json.loads((output / f"rank{rank}.json").read_text())["checksum"])


def _hf(data: Path, output: Path, slowed: bool) -> list[str]:
    return [
        str(SCRIPTS_DIR / "run_clm_style.py"),
        "--model_name_or_path", str(data / "model"),
        "--train_file", str(data / "train.txt"),
        "--validation_file", str(data / "valid.txt"),
        "--output_dir", str(output),
        "--do_train", "--per_device_train_batch_size", "4", "--max_steps", str(STEPS),
        "--logging_steps", "1", "--learning_rate", "1e-3", "--save_strategy", "no",
        "--report_to", "none", "--use_cpu", "--ddp_backend", "gloo", "--seed", "0",
        "--disable_tqdm", "true", "--stop_marker_step", str(MARKER),
        "--step_sleep", str(STEP_SLEEP_S if slowed else 0),
    ]  # fmt: skip


def _lightning(data: Path, output: Path, slowed: bool) -> list[str]:
    return [
        str(SCRIPTS_DIR / "lightning_ddp.py"), str(output), "2", "1",
        "--max-steps", str(STEPS), "--marker-step", str(MARKER),
        "--step-sleep", str(STEP_SLEEP_S if slowed else 0),
    ]  # fmt: skip


def _plain(data: Path, output: Path, slowed: bool) -> list[str]:
    return [
        str(SCRIPTS_DIR / "plain_ddp.py"), str(output), str(STEPS),
        "--marker-step", str(MARKER), "--step-sleep", str(STEP_SLEEP_S if slowed else 0),
    ]  # fmt: skip


SCRIPTS = {s.name: s for s in (Script("hf", _hf), Script("lightning", _lightning),
                               Script("plain", _plain))}  # fmt: skip


@dataclass(frozen=True)
class Launcher:
    """A launcher of 2 ranks: its command prefix, and how a batch system's signal reaches
    the ranks through it."""

    name: str
    prefix: Callable[[Path], list[str]]  # (a scratch directory) -> the command before train
    signal_all: Callable[[subprocess.Popen[str], Path, Mapping[str, str], int], None]


def _to_launcher(proc: subprocess.Popen[str], _: Path, __: Mapping[str, str], sig: int) -> None:
    proc.send_signal(sig)  # torch's agent (train) and mpirun pass it on to the ranks


def _scancel(proc: subprocess.Popen[str], scratch: Path, env: Mapping[str, str], sig: int) -> None:
    """What Slurm does before a time limit: signal every task of the step."""
    step = (scratch / "step").read_text().strip()
    name = signal.Signals(sig).name.removeprefix("SIG")
    subprocess.run(["scancel", f"--signal={name}", step], env=dict(env), check=True, timeout=60)


def _torchrun(_: Path) -> list[str]:
    return [command("train"), "--nproc-per-node", "2"]


def _srun(scratch: Path) -> list[str]:
    # Task 0 records the job and step for scancel; `exec` makes each task train itself.
    task = (
        f'[ "$SLURM_PROCID" = 0 ] && echo "$SLURM_JOB_ID.$SLURM_STEP_ID" > {scratch}/step; '
        'exec "$@"'
    )
    return ["srun", "-n", "2", "--kill-on-bad-exit=0", "sh", "-c", task, "sh", command("train")]


def _mpirun(_: Path) -> list[str]:
    return ["mpirun", "-np", "2", command("train")]


LAUNCHERS = {
    "torchrun": Launcher("torchrun", _torchrun, _to_launcher),
    "srun": Launcher("srun", _srun, _scancel),
    "mpirun": Launcher("mpirun", _mpirun, _to_launcher),
}


def tagged(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with a tag of this run, by which its rank processes are found."""
    return dict(env) | {TAG: uuid.uuid4().hex}


def rank_pid(tag: str, rank: int) -> int | None:
    """The PID of the script process of ``rank`` in the run tagged ``tag`` (None yet)."""
    wanted = (f"{TAG}={tag}".encode(), f"RANK={rank}".encode())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ddpimg.script.boot" in cmdline and all(item in environ for item in wanted):
            return int(entry.name)
    return None


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start(cmd: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        list(cmd), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for(marker: Path, proc: subprocess.Popen[str], limit_s: float = WAIT_S) -> None:
    """Until ``marker`` exists; the run must not end before (a hang guard, not a verdict)."""
    deadline = time.monotonic() + limit_s
    while not marker.exists():
        if proc.poll() is not None:
            _, stderr = proc.communicate()
            pytest.fail(
                f"the run ended ({proc.returncode}) before {marker.name}:\n{stderr[-4000:]}"
            )
        if time.monotonic() > deadline:
            pytest.fail(f"hang guard: no {marker.name} after {limit_s:g} s")
        time.sleep(0.1)


def finish(proc: subprocess.Popen[str], limit_s: float = WAIT_S) -> tuple[int, str]:
    """Its exit status and stderr; killed (and failed as such) past the hang guard."""
    try:
        _, stderr = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
        pytest.fail(f"hang guard: the run had not ended after {limit_s:g} s:\n{stderr[-4000:]}")
    return proc.returncode, stderr


def manifest(out: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return loaded


def metrics(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
