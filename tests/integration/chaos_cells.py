"""Cells of the fault matrix (``ddpimg.endings.matrix``) run on the real launchers: a
2-rank ``train --script`` of tests/integration/scripts/chaos_faults.py, which meets its
fault in the phase asked (no race decides where it lands), or for the rendezvous one rank
of two started alone and signalled while it waits. What came out is compared with the
matrix's expectation by ``check``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ddpimg.endings.matrix import LAUNCHERS, Ending, expected, normalized
from tests.integration.runs import command
from tests.integration.scripts_runtime import SCRIPTS_DIR

LOCAL, TORCHRUN, SRUN, MPIRUN = LAUNCHERS
SCRIPT = SCRIPTS_DIR / "chaos_faults.py"
TIMEOUT_S = 10  # --timeout: the stall watch's heartbeat and bounds
GUARD_S = 240.0  # hang guards only
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGUSR2": signal.SIGUSR2}


@dataclass(frozen=True)
class Cell:
    launcher: str
    fault: str
    phase: str

    @property
    def id(self) -> str:
        launcher = {LOCAL: "nproc"}.get(self.launcher, self.launcher)
        return f"{launcher}-{self.fault}-{self.phase}"

    @property
    def ending(self) -> Ending:
        found = expected(self.fault, self.phase, self.launcher)
        if found is None:
            raise ValueError(f"the matrix has no cell {self.id}")
        return found


@dataclass(frozen=True)
class Outcome:
    status: int
    line: str  # ddpimg's verdict: its last line that is no hint, normalized ("" if none)
    stderr: str
    manifest: dict[str, Any] | None


def verdict_line(stderr: str, directory: Path | None = None) -> str:
    """ddpimg's last line that is no hint, normalized, ``directory`` (the run's, which
    differs from run to run) written DIR."""
    lines = [line for line in stderr.splitlines() if line.startswith("ddpimg: ")]
    if not lines:
        return ""
    line = lines[-1] if directory is None else lines[-1].replace(str(directory), "DIR")
    return normalized(line)


def _command(cell: Cell, out: Path, marks: Path, scratch: Path) -> list[str]:
    train = [command("train"), "--timeout", str(TIMEOUT_S), "--preempt-check-every", "1",
             "--out", str(out)]  # fmt: skip
    script = ["--script", str(SCRIPT), str(marks), cell.fault, cell.phase]
    if cell.launcher == LOCAL:
        return [*train, "--nproc-per-node", "2", *script]
    if cell.launcher == TORCHRUN:
        head = [command("torchrun"), "--standalone", "--nproc-per-node", "2", "-m", "ddpimg"]
        return [*head, "train", *train[1:], *script]
    if cell.launcher == SRUN:
        task = (
            f'[ "$SLURM_PROCID" = 0 ] && echo "$SLURM_JOB_ID.$SLURM_STEP_ID" > {scratch}/step; '
            'exec "$@"'
        )
        return ["srun", "-n", "2", "--kill-on-bad-exit=0", "sh", "-c", task, "sh", *train, *script]
    return ["mpirun", "-np", "2", *train, *script]


def _signal_every_process(
    cell: Cell, proc: subprocess.Popen[str], scratch: Path, env: Mapping[str, str]
) -> None:
    """As the scheduler does: every process of the job (srun: scancel --signal on the step;
    mpirun: to mpirun, which passes SIGUSR2 on)."""
    sig = SIGNALS[cell.fault]
    if cell.launcher == SRUN:
        step = (scratch / "step").read_text().strip()
        name = cell.fault.removeprefix("SIG")
        subprocess.run(["scancel", f"--signal={name}", step], env=dict(env), check=True,
                       timeout=60)  # fmt: skip
    elif cell.launcher == MPIRUN:
        proc.send_signal(sig)
    else:
        os.killpg(proc.pid, sig)


def run_cell(cell: Cell, tmp: Path, env: Mapping[str, str]) -> Outcome:
    """Run ``cell`` once in the fresh directory ``tmp``."""
    if cell.phase == "rendezvous":
        return _alone_at_the_rendezvous(cell, tmp, env)
    out, marks, scratch = tmp / "out", tmp / "marks", tmp / "scratch"
    marks.mkdir()
    scratch.mkdir()
    proc = subprocess.Popen(
        _command(cell, out, marks, scratch), env=dict(env), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=tmp,
    )  # fmt: skip
    try:
        if cell.fault in SIGNALS:
            wanted = [marks / f"{cell.phase}-{rank}" for rank in (0, 1)]
            _wait(lambda: all(mark.exists() for mark in wanted), proc, f"{cell.phase} marks")
            _signal_every_process(cell, proc, scratch, env)
            (marks / "sent").touch()
        _, stderr = proc.communicate(timeout=GUARD_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang guard: {cell.id} ran past {GUARD_S:g} s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return Outcome(proc.returncode, verdict_line(stderr, tmp), stderr, _manifest(out))


def _alone_at_the_rendezvous(cell: Cell, tmp: Path, env: Mapping[str, str]) -> Outcome:
    """Rank 0 of a 2-task Slurm step started alone (its other node never starts): it waits
    at the rendezvous, where the signal reaches it."""
    host = os.uname().nodename.split(".")[0]
    step = {
        "SLURM_JOB_ID": "4243", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": f"{host},ghostnode7",
        "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "MASTER_ADDR": "127.0.0.1",
    }  # fmt: skip
    out = tmp / "out"
    env = dict(env) | step
    resolved = subprocess.run([command("ddpimg"), "env", "--json"], env=env, capture_output=True,
                              text=True, check=True, timeout=120)  # fmt: skip
    port = int(json.loads(resolved.stdout)["master_port"])
    cmd = [command("train"), "--timeout", "120", "--out", str(out), "--script", str(SCRIPT),
           str(tmp), cell.fault, cell.phase]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp
    )
    try:
        # Once its store listens it waits for rank 1 (its signal handlers came first).
        _wait(lambda: _listening(port), proc, "rank 0's store")
        proc.send_signal(SIGNALS[cell.fault])
        _, stderr = proc.communicate(timeout=GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Outcome(proc.returncode, verdict_line(stderr, tmp), stderr, _manifest(out))


def _listening(port: int) -> bool:
    """Whether a TCP socket of this machine listens on ``port`` (/proc/net/tcp*)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def _wait(ready: Any, proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + GUARD_S
    while not ready():
        if proc.poll() is not None:
            _, stderr = proc.communicate()
            pytest.fail(f"the run ended ({proc.returncode}) before {what}:\n{stderr[-4000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"hang guard: no {what} after {GUARD_S:g} s")
        time.sleep(0.05)


def _manifest(out: Path) -> dict[str, Any] | None:
    path = out / "manifest.json"
    if not path.exists():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def check(cell: Cell, outcome: Outcome) -> None:
    """``outcome`` is what the matrix says of ``cell``."""
    ending = cell.ending
    said = f"{cell.id}: exit {outcome.status}, line {outcome.line!r}\n{outcome.stderr[-3000:]}"
    status = ending.status
    if status is None:
        status = 128 + {"SIGKILL": 9, "SIGSEGV": 11}.get(cell.fault, 0)
    assert outcome.status == status, said
    assert outcome.line.startswith(ending.line), said
    if cell.fault != "raise" and cell.launcher in (LOCAL, SRUN):
        assert "Traceback" not in outcome.stderr, said
    record = outcome.manifest
    if " or " in ending.manifest:
        return  # the launcher's timing decides (mpirun): the table says both
    if ending.manifest == "none":
        assert record is None, said
        return
    assert record is not None, said
    words = ending.manifest.replace(",", "").split()
    assert (record["status"], str(record["exit_status"])) == tuple(words[:2]), said
    for entry in words[2:]:
        assert entry in record, f"{said}\nmanifest.json has no {entry}: {sorted(record)}"
