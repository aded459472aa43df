"""A user's own script under ``train --script`` gets the bundled trainers' runtime, with no
change to a Hugging Face Trainer script or a Lightning script and three lines in a plain
PyTorch loop; each of the three under ``--nproc-per-node 2``, ``srun -n 2`` and
``mpirun -np 2``:

* USR2 in the middle of the run (as ``ddpimg sbatch``'s job script forwards it before the
  time limit): the ranks agree on a step, the framework writes its checkpoint (the plain
  loop its own), every rank exits with status 75 and manifest.json says ``preempted``;
  the same command then continues from that checkpoint to the end, and the losses of every
  step and the final weights are those of a run never stopped;
* SIGSTOP of rank 1 in the middle of the run: rank 0 names it (host, pid, last step and
  phase) and exits with status 5, the stopped rank's sentinel kills it, manifest.json
  records ``rank_lost``, and everything has ended within ``--timeout`` + 20 s, although the
  scripts' own process groups wait 30 minutes (transformers' ``ddp_timeout``) or more.

Tolerances: a continued run is compared with the uninterrupted reference of the same script
under torch's launcher, step by step. On this machine the continued runs reproduced the
reference bitwise under the same launcher (measured difference 0.0 for all three scripts:
the same reduction order, the RNG and data position restored). Under srun and mpirun the
ranks reduce in the same order, and the measured difference was again 0.0; the comparison
allows a relative 1e-6 (an order of magnitude above float32's rounding of one step, far
below what a wrong batch or a restarted epoch changes: 1e-2 to 1 at the first step after
the resume, measured with Lightning's plain DataLoader).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ddpimg import exitcodes
from ddpimg.runtime.stall import StallLimits
from tests.integration.hf_model import tiny_gpt2, write_text
from tests.integration.runs import run
from tests.integration.scripts_runtime import (
    CHECK_EVERY,
    LAUNCHERS,
    MARKER,
    SCRIPTS,
    STEPS,
    TAG,
    TIMEOUT_S,
    WAIT_S,
    Script,
    alive,
    finish,
    manifest,
    metrics,
    rank_pid,
    start,
    tagged,
    wait_for,
)

HOST = socket.gethostname().split(".")[0]
REL = 1e-6
LIMITS = StallLimits.for_timeout(TIMEOUT_S, "gloo", script=True)
# README's bound on a stall: --timeout + 20 s; on top, the processes' own exit (interpreter
# teardown, the launcher collecting them) on a busy machine.
BOUND_S = TIMEOUT_S + 20
EXIT_ALLOWANCE_S = 10

LAUNCHER_MARKS = {
    "torchrun": [pytest.mark.torchrun],
    "srun": [pytest.mark.slurm],
    "mpirun": [pytest.mark.mpi],
}
SCRIPT_MARKS = {"hf": [], "lightning": [pytest.mark.lightning], "plain": []}
CELLS = [
    pytest.param(script, launcher, marks=[*SCRIPT_MARKS[script], *LAUNCHER_MARKS[launcher]],
                 id=f"{script}-{launcher}")
    for script in SCRIPTS
    for launcher in LAUNCHERS
]  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Text files and a tiny GPT-2 for the Hugging Face script (nothing downloaded)."""
    folder = tmp_path_factory.mktemp("hf-data")
    train = write_text(folder / "train.txt", 400, seed=0)
    write_text(folder / "valid.txt", 40, seed=1)
    tiny_gpt2(folder / "model", train)
    return folder


@pytest.fixture(scope="module")
def reference(
    tmp_path_factory: pytest.TempPathFactory, run_env: dict[str, str], data: Path
) -> Callable[[str], Path]:
    """The output directory of each script's uninterrupted run (torch's launcher)."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            folder = tmp_path_factory.mktemp(f"reference-{name}")
            output = folder / "output"
            output.mkdir()
            cmd = [*LAUNCHERS["torchrun"].prefix(folder), "--out", str(folder / "run")]
            run([*cmd, "--script", *SCRIPTS[name].args(data, output, False)], run_env, WAIT_S)
            made[name] = output
        return made[name]

    return get


def environment(launcher: str, request: pytest.FixtureRequest) -> dict[str, str]:
    fixture = "slurm_env" if launcher == "srun" else "run_env"
    env: dict[str, str] = request.getfixturevalue(fixture)
    return env


def check_losses(script: Script, output: Path, expected: Path) -> None:
    """The run's losses (from where its rank 0 knows them) and both ranks' final weights
    equal the reference's."""
    losses, wanted = script.losses(output), script.losses(expected)
    assert losses, "no losses reported"
    assert set(losses) <= set(wanted)
    assert max(losses) == STEPS
    for step, loss in losses.items():
        assert loss == pytest.approx(wanted[step], rel=REL), f"step {step}"
    for rank in (0, 1):
        assert script.checksum(output, rank) == pytest.approx(
            script.checksum(expected, rank), rel=REL
        )


@pytest.mark.parametrize(("name", "launcher"), CELLS)
def test_usr2_checkpoints_exits_75_and_the_same_command_continues(
    name: str,
    launcher: str,
    tmp_path: Path,
    data: Path,
    *,
    reference: Callable[[str], Path],
    request: pytest.FixtureRequest,
) -> None:
    script, launch = SCRIPTS[name], LAUNCHERS[launcher]
    env = environment(launcher, request)
    out, output = tmp_path / "run", tmp_path / "output"
    output.mkdir()
    cmd = [*launch.prefix(tmp_path), "--out", str(out), "--preempt-check-every",
           str(CHECK_EVERY), "--script", *script.args(data, output, True)]  # fmt: skip
    proc = start(cmd, env)
    wait_for(output / f"step-{MARKER}", proc)
    launch.signal_all(proc, tmp_path, env, signal.SIGUSR2)
    code, stderr = finish(proc)
    assert code == exitcodes.PREEMPTED, stderr[-4000:]
    record = manifest(out)
    assert (record["status"], record["exit_status"]) == ("preempted", exitcodes.PREEMPTED)
    stop = record["preemption"]
    assert stop["cause"] == "SIGUSR2"
    assert MARKER < stop["step"] < STEPS, stop
    assert stop["step"] % CHECK_EVERY == 0, stop
    saved = {
        "hf": str(output / f"checkpoint-{stop['step']}"),
        "lightning": str(output / "hpc_ckpt_1.ckpt"),
        "plain": None,  # its own checkpoint, which ddpimg is not told of
    }[name]
    assert stop["checkpoint"] == saved
    assert saved is None or os.path.exists(saved)
    assert "the same command continues the run" in stderr

    again = run(cmd, env, timeout=WAIT_S)
    record = manifest(out)
    assert (record["status"], record["exit_status"]) == ("completed", 0), again.stderr[-3000:]
    assert record["continues"]["status"] == "preempted"
    if saved is not None:
        assert record["resumed_from"]["path"] == saved
    check_losses(script, output, reference(name))
    steps = [line["step"] for line in metrics(out) if line["kind"] == "train"]
    assert steps == list(range(1, STEPS + 1)), "metrics.jsonl: every step once, in order"
    assert metrics(out)[-1]["kind"] == "summary"


def check_named(stderr: str, victim_pid: int) -> None:
    """Rank 0's one error names rank 1: host, pid, how long ago, its last step and phase."""
    errors = re.findall(r"ddpimg: error: rank 0 \(.*", stderr)
    assert len(errors) == 1, stderr[-4000:]
    pattern = (
        rf"rank 0 \({HOST}\) gave up at step (\d+) \(no progress for (\d+) s in phase (\w+) "
        rf"\(--timeout {TIMEOUT_S}\)\): rank 1 \(host {HOST}, pid {victim_pid}\) stopped "
        rf"reporting (\d+) s ago \(last report: step (\d+), phase (\w+)\)"
    )
    match = re.search(pattern, errors[0])
    assert match, errors[0]
    print(errors[0])  # shown by pytest -rP
    _, stuck, _, ago, _, phase = match.groups()
    assert int(stuck) >= TIMEOUT_S
    assert TIMEOUT_S - 1 <= int(ago) <= TIMEOUT_S + LIMITS.grace_s, errors[0]
    assert phase in ("train", "optimizer")


@pytest.mark.parametrize(("name", "launcher"), CELLS)
def test_a_stopped_rank_is_named_and_every_process_ends_within_the_bound(
    name: str,
    launcher: str,
    tmp_path: Path,
    data: Path,
    request: pytest.FixtureRequest,
) -> None:
    script, launch = SCRIPTS[name], LAUNCHERS[launcher]
    env = tagged(environment(launcher, request))
    out, output = tmp_path / "run", tmp_path / "output"
    output.mkdir()
    cmd = [*launch.prefix(tmp_path), "--out", str(out), "--timeout", str(TIMEOUT_S),
           "--script", *script.args(data, output, True)]  # fmt: skip
    proc = start(cmd, env)
    wait_for(output / f"step-{MARKER}", proc)
    victim = rank_pid(env[TAG], 1)
    assert victim is not None, "rank 1's process not found"
    os.kill(victim, signal.SIGSTOP)
    stopped_at = time.monotonic()
    code, stderr = finish(proc, limit_s=BOUND_S * 4)
    took = time.monotonic() - stopped_at
    print(f"stall to the last process's exit: {took:.1f} s")  # shown by pytest -rP
    assert code == exitcodes.RANK_LOST, stderr[-4000:]
    assert not alive(victim)
    check_named(stderr, victim)
    assert re.search(
        rf"ddpimg: rank 1 on {HOST} \(pid {victim}\) has not run for \d+ s .*its sentinel "
        "kills it with SIGKILL",
        stderr,
    ), stderr[-3000:]
    record = manifest(out)
    assert (record["status"], record["exit_status"]) == ("failed", exitcodes.RANK_LOST)
    assert record["rank_lost"]["ranks"] == [1]
    assert record["rank_lost"]["hosts"] == [HOST]
    assert TIMEOUT_S <= took < BOUND_S + EXIT_ALLOWANCE_S, f"the stalled run took {took:.1f} s"
