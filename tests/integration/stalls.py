"""What the stall tests share (here and in tests/multinode): a run long enough to be stopped
in the middle, the wait for its first checkpoint, and the checks of what the surviving
ranks say, the exit statuses and the time the whole run took to end.

The documented bound (docs/checkpoints-and-failures.md: every process gone within --timeout +
20 s of the stall, plus the step under way and the time to exit) is made of the program's own
timers, and those are what is checked: the survivors give up between --timeout and --timeout +
grace after the stopped rank's last report (check_named), its sentinel kills it once it has not
run for --timeout + grace (check_sentinel). The whole run's time to end is only guarded against
a hang (check_bound): exiting is work a busy machine does slowly, and no verdict here is the
machine's speed."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from ddpimg import exitcodes
from ddpimg.runtime.stall import StallLimits
from ddpimg.train.checkpoint.files import CHECKPOINTS, candidates, verify
from tests.integration.runs import read_metrics

TIMEOUT_S = 10
LIMITS = StallLimits.for_timeout(TIMEOUT_S, "gloo")
# A hang guard on the whole stall, from the stop to the last process's exit: 5x the 18-19 s
# it took on a 2-core machine (the page's "tested" figure).
STALL_HANG_GUARD_S = 5 * 19
STALL_TRAIN = [
    "--data", "synthetic", "--epochs", "1", "--log-every", "1", "--global-batch-size", "64",
    "--train-samples", "60000", "--eval-samples", "256", "--max-steps", "2000", "--seed", "7",
    "--checkpoint-every", "5", "--timeout", str(TIMEOUT_S),
]  # fmt: skip
# A task of an srun step that records its train process's PID and, once that ends, its
# exit status (train runs in the background of the wrapper so that a killed one still gets
# its status written).
RECORDING_TASK = (
    '"$@" & echo $! > "$REC/pid.$SLURM_PROCID"; wait $!; echo $? > "$REC/status.$SLURM_PROCID"'
)


def wait_for_checkpoint(out: Path, proc: subprocess.Popen[str], limit_s: float) -> None:
    """Until the run has a checkpoint and has logged a few steps after it."""
    deadline = time.monotonic() + limit_s
    while True:
        done = candidates(out / CHECKPOINTS)
        logged = [m for m in read_metrics(out) if m["kind"] == "train"] if done else []
        if done and logged and logged[-1]["step"] >= 8:
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended (status {proc.returncode}) before its first checkpoint")
        if time.monotonic() > deadline:
            pytest.fail(f"no checkpoint after {limit_s:g} s")
        time.sleep(0.2)


# How Gloo words the timeout of the survivor's collective: the receive that timed out raises
# the first, and so does a send the stopped rank no longer takes (a run of 2026-11-29 under
# srun timed out in its send); gloo's UnboundBuffer::waitRecv then closes every pair of the
# context with the second, which is what a rank sees whose pending operation was another one
# (the ring's other buffer, or the send half): CI's run of 2026-11-26 printed it between
# namespace nodes.
GLOO_TIMEOUT = (
    rf"(?:gloo: Timed out waiting {TIMEOUT_S * 1000}ms for (?:recv|send) operation to complete"
    r"|Application timeout caused pair closure)"
)


def check_named(
    stderr: str, *, observer: int, victim: int, victim_pid: int, victim_host: str, out: Path
) -> None:
    """The survivor ``observer`` printed the one error naming the victim, its host and pid,
    its last step and phase, how long ago (about the timeout), and the newest checkpoint."""
    errors = re.findall(rf"ddpimg: error: rank {observer} \(.*", stderr)
    assert len(errors) == 1, stderr[-4000:]
    newest = candidates(out / CHECKPOINTS)[0]
    assert verify(newest) is None
    pattern = (
        rf"ddpimg: error: rank {observer} \(\S+\) gave up at step (\d+) \({GLOO_TIMEOUT}\): "
        rf"rank {victim} \(host {victim_host}, pid {victim_pid}\) stopped reporting (\d+) s ago "
        rf"\(last report: step (\d+), phase (\w+)\)(; also waiting: [^;]+)?; "
        rf"last valid checkpoint: {re.escape(str(newest))} \(step (\d+)\)"
    )
    match = re.search(pattern, errors[0])
    assert match, errors[0]
    print(errors[0])  # shown by pytest -rP
    gave_up_at, ago, victim_step, phase, _, checkpoint_step = match.groups()
    assert TIMEOUT_S - 1 <= int(ago) <= TIMEOUT_S + LIMITS.grace_s, errors[0]
    # the last report came at most a heartbeat before the stop: some steps earlier
    assert int(victim_step) <= int(gave_up_at), errors[0]
    assert int(checkpoint_step) <= int(gave_up_at), errors[0]
    assert phase in ("data", "forward", "backward", "optimizer", "collective", "checkpoint")
    hint = stderr[stderr.index(errors[0]) + len(errors[0]) :].lstrip("\n")
    assert hint.startswith(f"  hint: look at {victim_host} (that rank's log"), hint[:300]


def check_sentinel(stderr: str, victim: int, victim_pid: int, victim_host: str) -> None:
    """The stopped rank's sentinel killed it once it had not run for timeout + grace."""
    match = re.search(
        rf"ddpimg: rank {victim} on {victim_host} \(pid {victim_pid}\) has not run for (\d+) s "
        r"\(stopped, or hung holding the interpreter\): its sentinel kills it with SIGKILL",
        stderr,
    )
    assert match, stderr[-3000:]
    assert LIMITS.sentinel_s <= int(match.group(1)) + 0.5 <= LIMITS.sentinel_s + 2


def check_manifest(out: Path, victim: int, victim_host: str) -> None:
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["status"], manifest["exit_status"]) == ("failed", exitcodes.RANK_LOST)
    assert manifest["rank_lost"]["ranks"] == [victim]
    assert manifest["rank_lost"]["hosts"] == [victim_host]
    assert manifest["rank_lost"]["checkpoint"] == str(candidates(out / CHECKPOINTS)[0])
    assert not any(m["kind"] == "summary" for m in read_metrics(out))


def check_bound(stopped_at: float, ended_at: float) -> None:
    """Every process (the stopped one included) ended, not before the timeout: the
    survivors waited as long as they were told to. (The upper bound is the timers'
    business, checked by check_named and check_sentinel; here only a hang guard.)"""
    took = ended_at - stopped_at
    print(f"stall to the last process's exit: {took:.1f} s")  # shown by pytest -rP
    assert took >= TIMEOUT_S, f"the run ended {took:.1f} s after the stall"
    assert took < STALL_HANG_GUARD_S, (
        f"hang guard: the stalled run took {took:.1f} s to end, more than 5x the 19 s "
        "measured on a 2-core machine"
    )
