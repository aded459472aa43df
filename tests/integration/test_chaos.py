"""Chaos: a 2-rank run with checkpoints is hit several times, at random steps, by a random
fault, and each time the same command runs again (``--resume auto``, the default). In the
end the losses are those of an uninterrupted run, no corrupt checkpoint was ever loaded,
and every intermediate exit status is one that the "Exit statuses" table of
docs/checkpoints-and-failures.md documents.

Faults: SIGKILL of a random rank; SIGSTOP of a random rank (its sentinel kills it, the other
names it); SIGTERM to the launcher (preemption: checkpoint, exit 75); the disk filling up
(the tmpfs under ``--out`` shrunk to what is used, so the next checkpoint cannot be
written); a rank killed and then the newest loadable checkpoint corrupted (one byte of its
model changed: its SHA-256 no longer matches, ``--resume auto`` must skip it and say so).

The schedule (faults and steps) comes from a seed printed at the start
(``DDPIMG_CHAOS_SEED=N`` replays it). The runs use ``train --nproc-per-node 2`` with
``--deterministic`` on the CPU, where a resumed run repeats the uninterrupted one bitwise
(the noise floor measured between two uninterrupted runs here is 0), so the losses are
compared exactly. About two minutes on two cores; deadlines are hang guards only.

The fault matrix (``ddpimg.endings.matrix``, the table "Every ending" of
docs/checkpoints-and-failures.md): chosen cells of it on the real launchers, each giving the
status, the verdict line and the manifest the table says. The phase a fault lands in is the
script's to choose (tests/integration/scripts/chaos_faults.py), and no race decides the
ending (``ddpimg.endings.workers``), so one run a cell proves it; ``DDPIMG_CHAOS_REPEATS=N``
runs each N times and requires one status and one line every time, and
``DDPIMG_CHAOS_CELLS=all`` runs the cells beyond CI's too (torchrun, mpirun, more phases).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpimg.endings.matrix import LAUNCHERS
from ddpimg.runtime.children import child_pids
from ddpimg.train.checkpoint.files import CHECKPOINTS, candidates, verify
from tests.integration.chaos_cells import Cell, check, run_cell, verdict_line
from tests.integration.runs import command, run, train_losses

STEPS = 16
RUN = [
    "gpt", "--size", "tiny", "--seq-len", "16", "--global-batch-size", "8",
    "--train-samples", "1024", "--eval-samples", "8", "--epochs", "1", "--data", "synthetic",
    "--seed", "11", "--deterministic", "--log-every", "1", "--max-steps", str(STEPS),
    "--checkpoint-every", "2", "--timeout", "10", "--preempt-check-every", "1",
    "--nproc-per-node", "2",
]  # fmt: skip
FAULTS = ("kill", "stop", "term", "disk", "corrupt")
FAULT_COUNT = 3
STATUS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "checkpoints-and-failures.md"
# Hang guards (a run takes about 15 s here, a SIGSTOP about 20 s more).
RUN_GUARD_S = 300.0
MAX_ATTEMPTS = 4
# A hang guard on shrinking the disk while the ranks write to it (each try reads what is used
# again; a try fails only while a write is under way, which takes milliseconds here).
SHRINK_GUARD_S = 60.0


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs for --out, so that the disk-full fault can shrink it (root only)."""
    if os.geteuid() != 0:
        pytest.skip("the disk-full fault mounts a tmpfs: needs root (CI runs as root)")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def resize(mount: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)


def shrink_to_what_is_used(mount: Path, proc: subprocess.Popen[str]) -> None:
    """Remount the tmpfs at what it holds plus 64 KiB, so that the next checkpoint cannot be
    written. The kernel refuses a size under what is in use ("tmpfs: Too small a size for
    current use", mount's exit 32), and the ranks may be writing a checkpoint between the
    reading of the usage and the remount (CI hit that once): read again and retry while the
    run lives, until the hang guard. A run that ended meanwhile got no fault, as when the
    fault's step comes after its last one."""
    deadline = time.monotonic() + SHRINK_GUARD_S
    while True:
        used = os.statvfs(mount)
        size_k = (used.f_blocks - used.f_bfree) * used.f_frsize // 1024 + 64
        remount = subprocess.run(
            ["mount", "-o", f"remount,size={size_k}k", str(mount)],
            capture_output=True,
            text=True,
            check=False,
        )
        if remount.returncode == 0 or proc.poll() is not None:
            return
        if time.monotonic() > deadline:
            pytest.fail(
                f"hang guard: the disk fault's remounts at what {mount} holds were refused for "
                f"{SHRINK_GUARD_S:.0f} s, the last with exit {remount.returncode}: "
                f"{remount.stderr.strip()}"
            )
        time.sleep(0.02)


def documented_statuses() -> set[int]:
    """The statuses of the documented "Exit statuses" table."""
    section = STATUS_PAGE.read_text().split("## Exit statuses\n", 1)[1].split("\n## ", 1)[0]
    return {int(status) for status in re.findall(r"^\| `(\d+)` \|", section, re.MULTILINE)}


def test_the_exit_status_table_documents_what_faults_end_with() -> None:
    """The statuses a run hit by these faults ends with: a user error (the full disk), a
    lost rank, preemption; 0 when the fault came after the run finished."""
    assert {0, 2, 5, 75} <= documented_statuses()


def reached(out: Path, step: int, since: float) -> bool:
    """Whether this run (metrics.jsonl rewritten after ``since``) logged ``step``: a resumed
    run first keeps the lines up to its checkpoint, so an earlier step counts as reached as
    soon as it starts."""
    metrics = out / "metrics.jsonl"
    try:
        if metrics.stat().st_mtime < since:
            return False
        lines = metrics.read_text().splitlines()
    except FileNotFoundError:
        return False
    steps = [json.loads(line)["step"] for line in lines if '"kind": "train"' in line]
    return bool(steps) and max(steps) >= step


def hit(
    out: Path, env: dict[str, str], mount: Path, fault: tuple[str, int], rng: random.Random
) -> tuple[int, str]:
    """Run the command, inject ``fault`` (kind, step) once that step is logged; (status,
    stderr)."""
    began = time.time()
    proc = subprocess.Popen(
        [command("train"), *RUN, "--out", str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        return inject(proc, out, mount=mount, fault=fault, rng=rng, began=began)
    finally:
        # Whatever failed above, no rank outlives the test (one would keep the tmpfs busy).
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def inject(
    proc: subprocess.Popen[str],
    out: Path,
    *,
    mount: Path,
    fault: tuple[str, int],
    rng: random.Random,
    began: float,
) -> tuple[int, str]:
    """Wait for the fault's step in the run ``proc`` (begun at ``began``), inject the fault
    and wait for the run's end; (status, stderr). A hang guard fails the test; the caller
    then ends the run."""
    kind, step = fault
    deadline = time.monotonic() + RUN_GUARD_S
    while not reached(out, step, began) and proc.poll() is None:
        if time.monotonic() > deadline:
            pytest.fail(f"hang guard: step {step} not reached within {RUN_GUARD_S:.0f} s")
        time.sleep(0.05)
    workers = sorted(child_pids(proc.pid))
    if proc.poll() is None and workers:
        victim = rng.choice(workers)
        if kind in ("kill", "corrupt"):
            os.kill(victim, signal.SIGKILL)
        elif kind == "stop":
            os.kill(victim, signal.SIGSTOP)
        elif kind == "term":
            os.kill(proc.pid, signal.SIGTERM)
        else:
            shrink_to_what_is_used(mount, proc)
    try:
        _, stderr = proc.communicate(timeout=RUN_GUARD_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang guard: the run outlived {RUN_GUARD_S:.0f} s after a {kind}")
    if kind == "disk":
        resize(mount, "64m")
    if kind == "corrupt":
        # The checkpoint the next run would load: the newest that still verifies. The newest
        # of all may be one an earlier fault corrupted, and flipping its byte again would
        # repair it.
        loadable = [path for path in candidates(out / CHECKPOINTS) if verify(path) is None]
        if loadable:
            model = loadable[0] / "ddp" / "model.pt"
            raw = bytearray(model.read_bytes())
            raw[len(raw) // 2] ^= 0xFF
            model.write_bytes(bytes(raw))
            stderr += f"\nchaos: corrupted {loadable[0]}\n"
    return proc.returncode, stderr


@pytest.mark.torchrun
def test_random_faults_lose_nothing(disk: Path, tmp_path: Path, run_env: dict[str, str]) -> None:
    seed = int(os.environ.get("DDPIMG_CHAOS_SEED", random.randrange(2**32)))
    print(f"chaos seed {seed} (replay: DDPIMG_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    documented = documented_statuses()
    reference = tmp_path / "reference"
    run([command("train"), *RUN, "--out", str(reference)], run_env, timeout=RUN_GUARD_S)
    out = disk / "run"
    # The checkpoint the last fault corrupted: the next run must skip it, not load it (a
    # later run may write a new, valid one under the same name).
    corrupted: list[str] = []
    for number in range(FAULT_COUNT):
        fault, step = rng.choice(FAULTS), rng.randrange(1, STEPS)
        status, stderr = hit(out, run_env, disk, (fault, step), rng)
        where = f"seed {seed}, fault {number} ({fault} at step {step})"
        assert status in documented, f"{where}: exit status {status}\n{stderr[-3000:]}"
        for path in corrupted:
            assert f"skipping checkpoint {path}: " in stderr, f"{where}: {path} not skipped"
            assert f"resuming from {path} " not in stderr, f"{where}: loaded corrupt {path}"
        corrupted = re.findall(r"chaos: corrupted (\S+)", stderr)
    for _ in range(MAX_ATTEMPTS):
        finished = run([command("train"), *RUN, "--out", str(out)], run_env, check=False)
        for path in corrupted:
            assert f"skipping checkpoint {path}: " in finished.stderr, f"seed {seed}: {path}"
            assert f"resuming from {path} " not in finished.stderr, f"seed {seed}: {path}"
        corrupted = []
        if finished.returncode == 0:
            break
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["status"], manifest["exit_status"]) == ("completed", 0), f"seed {seed}"
    assert train_losses(out) == train_losses(reference), f"seed {seed}"


# CI's cells: each mechanism once (the launcher's verdict on a killed rank and its record, a
# crash under srun named by the survivor, a preemption in the middle of a checkpoint write,
# a signal at the rendezvous, rank 0's own error alone under srun). Wider, by hand:
# DDPIMG_CHAOS_CELLS=all.
LOCAL, TORCHRUN, SRUN, MPIRUN = LAUNCHERS
CI_CELLS = (
    Cell(LOCAL, "SIGKILL", "step"),
    Cell(LOCAL, "SIGUSR2", "checkpoint"),
    Cell(LOCAL, "SIGTERM", "rendezvous"),
    Cell(SRUN, "SIGSEGV", "checkpoint"),
    Cell(SRUN, "raise", "step"),
)
MORE_CELLS = (
    Cell(LOCAL, "SIGSEGV", "checkpoint"),
    Cell(LOCAL, "SIGKILL", "final"),
    Cell(LOCAL, "SIGTERM", "step"),
    Cell(LOCAL, "SIGTERM", "final"),
    Cell(LOCAL, "SIGUSR2", "rendezvous"),
    Cell(LOCAL, "raise", "checkpoint"),
    Cell(TORCHRUN, "SIGKILL", "checkpoint"),
    Cell(TORCHRUN, "SIGSEGV", "step"),
    Cell(TORCHRUN, "raise", "step"),
    Cell(TORCHRUN, "SIGTERM", "step"),
    Cell(SRUN, "SIGKILL", "step"),
    Cell(SRUN, "SIGKILL", "final"),
    Cell(SRUN, "SIGTERM", "step"),
    Cell(SRUN, "SIGUSR2", "checkpoint"),
    Cell(SRUN, "SIGUSR2", "final"),
    Cell(SRUN, "SIGTERM", "rendezvous"),
    Cell(SRUN, "raise", "checkpoint"),
    Cell(MPIRUN, "SIGUSR2", "step"),
    Cell(MPIRUN, "raise", "step"),
    Cell(MPIRUN, "SIGKILL", "step"),
)
REPEATS = int(os.environ.get("DDPIMG_CHAOS_REPEATS", "1"))
ENGINE = {LOCAL: pytest.mark.torchrun, TORCHRUN: pytest.mark.torchrun,
          SRUN: pytest.mark.slurm, MPIRUN: pytest.mark.mpi}  # fmt: skip


def _cells() -> list[object]:
    every = os.environ.get("DDPIMG_CHAOS_CELLS") == "all"
    chosen = CI_CELLS + (MORE_CELLS if every else ())
    return [pytest.param(cell, id=cell.id, marks=ENGINE[cell.launcher]) for cell in chosen]


@pytest.mark.parametrize("cell", _cells())
def test_a_fault_ends_as_the_matrix_says_every_time(
    cell: Cell, tmp_path: Path, run_env: dict[str, str], request: pytest.FixtureRequest
) -> None:
    env = request.getfixturevalue("slurm_env") if cell.launcher == SRUN else run_env
    seen: set[tuple[int, str]] = set()
    for attempt in range(REPEATS):
        outcome = run_cell(cell, Path(tempfile.mkdtemp(dir=tmp_path)), env)
        check(cell, outcome)
        seen.add((outcome.status, outcome.line))
        assert len(seen) == 1, f"{cell.id}, run {attempt}: {sorted(seen)}"


MNIST = [
    "mnist", "--data", "synthetic", "--epochs", "1", "--log-every", "1",
    "--global-batch-size", "64", "--train-samples", "60000", "--eval-samples", "256",
    "--max-steps", "2000", "--timeout", "10", "--nproc-per-node", "2",
]  # fmt: skip


@pytest.mark.torchrun
def test_a_trainer_worker_killed_from_outside_is_named_with_its_signal(
    tmp_path: Path, run_env: dict[str, str]
) -> None:
    """Issue 54: ``train mnist`` on two local workers, the second killed with kill -9 once
    training runs, exited 1 in 2 of 3 runs with torch's agent's line last, 5 in 1."""
    out = tmp_path / "out"
    seen: set[tuple[int, str]] = set()
    for attempt in range(REPEATS):
        began = time.time()
        proc = subprocess.Popen(
            [command("train"), *MNIST, "--out", str(out), "--resume", "none"], env=run_env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + RUN_GUARD_S
            while not reached(out, 3, began):
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "hang guard: 3 steps not reached"
                time.sleep(0.05)
            victim = next(pid for pid in child_pids(proc.pid) if _rank_of(pid) == "1")
            os.kill(victim, signal.SIGKILL)
            _, stderr = proc.communicate(timeout=RUN_GUARD_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        line = verdict_line(stderr)
        said = f"run {attempt}: exit {proc.returncode}\n{stderr[-3000:]}"
        assert proc.returncode == 5, said
        assert line.startswith("ddpimg: error: rank N (host H, pid P) was killed by SIG: "), said
        assert f"pid {victim}) was killed by SIGKILL: " in stderr, said
        manifest = json.loads((out / "manifest.json").read_text())
        assert (manifest["status"], manifest["exit_status"]) == ("failed", 5), said
        assert manifest["killed"] == {"rank": 1, "host": manifest["killed"]["host"],
                                      "pid": victim, "signal": "SIGKILL"}  # fmt: skip
        seen.add((proc.returncode, line))
    assert len(seen) == 1, sorted(seen)


def _rank_of(pid: int) -> str | None:
    """The RANK a worker process was started with (torch's agent sets it)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    found = next((item for item in environ if item.startswith(b"RANK=")), None)
    return None if found is None else found[5:].decode()
