"""`ddpimg sbatch --submit` on the private real Slurm: jobs run to completion, and a
preempted job checkpoints, is requeued by its own batch script, resumes and ends with the
loss of an uninterrupted run.

CPU only: ``--runtime none --gpu-request none --gpus-per-node 2`` gives two tasks (ranks,
Gloo) and requests no GPUs. Every wait is bounded. A requeued job only becomes eligible
after the credential lifetime (``AuthInfo cred_expire``, 120 s by default); the tests move
its start time to a few seconds from now instead of waiting for that.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.runs import command, read_metrics, run, summary, train_losses

# Long enough (several seconds) that the preemption test's signal, sent at step 3, arrives
# while the job still trains (with 12 steps it once came after the last one), short enough
# for a loaded machine.
STEPS = 200
TRAIN = [
    "train", "--data", "synthetic", "--epochs", "1", "--max-steps", str(STEPS),
    "--log-every", "1", "--global-batch-size", "32", "--train-samples", str(32 * STEPS),
    "--eval-samples", "256",
    "--seed", "11", "--deterministic", "--preempt-check-every", "1",
]  # fmt: skip
SBATCH = [
    "sbatch", "--site", "local", "--runtime", "none", "--gpu-request", "none",
    "--nodes", "1", "--gpus-per-node", "2", "--time", "10", "--submit",
]  # fmt: skip
JOB_LIMIT_S = 150
POLL_S = 0.5
REVOKE_MARGIN_S = 3
DONE = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")

pytestmark = pytest.mark.slurm


def submit(args: list[str], env: dict[str, str], cwd: Path) -> str:
    proc = run([command("ddpimg"), *SBATCH, *args], env, cwd=cwd, timeout=60)
    job_id = proc.stdout.strip()
    assert re.fullmatch(r"\d+", job_id), f"not a job id: {proc.stdout!r}"
    return job_id


def job_info(job_id: str, env: dict[str, str]) -> dict[str, str]:
    """`scontrol show job` as key=value pairs (JobState, Restarts, ExitCode, ...)."""
    proc = run(["scontrol", "show", "job", "-o", job_id], env, timeout=30)
    return dict(word.split("=", 1) for word in proc.stdout.split() if "=" in word)


def wait_until(what: str, probe: Callable[[], bool], limit_s: float = JOB_LIMIT_S) -> None:
    deadline = time.monotonic() + limit_s
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit_s:g} s waiting until {what}")
        time.sleep(POLL_S)


def wait_for_end(job_id: str, env: dict[str, str], log: Path) -> dict[str, str]:
    info: dict[str, str] = {}

    def ended() -> bool:
        info.update(job_info(job_id, env))
        return info.get("JobState") in DONE

    try:
        wait_until(f"job {job_id} ends", ended)
    except AssertionError as err:
        tail = log.read_text()[-3000:] if log.exists() else "(no log)"
        raise AssertionError(f"{err}; last state {info.get('JobState')}\n{tail}") from err
    return info


def release_requeued(job_id: str, env: dict[str, str], restarts: int) -> None:
    """Wait until the job is pending again after its ``restarts``-th requeue, then let it
    start now rather than after the credential lifetime."""

    def pending_again() -> bool:
        info = job_info(job_id, env)
        return info.get("JobState") == "PENDING" and info.get("Restarts") == str(restarts)

    wait_until(f"job {job_id} is requeued ({restarts})", pending_again, limit_s=90)
    # Not "now": slurmd refuses a job credential created in the same second as it revoked
    # the job's previous ones ("Job credential revoked"), which fails the job.
    run(["scontrol", "update", f"JobId={job_id}", f"StartTime=now+{REVOKE_MARGIN_S}"], env)


def wait_for_steps(out: Path, steps: int) -> None:
    def logged() -> bool:
        metrics = out / "metrics.jsonl"
        return metrics.exists() and len(train_losses(out)) >= steps

    wait_until(f"{out}/metrics.jsonl shows {steps} steps", logged, limit_s=120)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, slurm_env: dict[str, str]) -> Path:
    """A submitted job that runs TRAIN to the end: the test of completion and the reference
    of the preemption test."""
    cwd = tmp_path_factory.mktemp("sbatch-complete")
    job_id = submit(["--", *TRAIN, "--out", str(cwd / "run")], slurm_env, cwd)
    log = cwd / f"ddpimg-{job_id}.out"
    info = wait_for_end(job_id, slurm_env, log)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), log.read_text()
    return cwd


def test_submitted_job_trains_to_completion(uninterrupted: Path) -> None:
    out = uninterrupted / "run"
    assert summary(out)["world_size"] == 2
    assert len(train_losses(out)) == STEPS
    assert any(m["kind"] == "eval" for m in read_metrics(out))
    (log,) = uninterrupted.glob("ddpimg-*.out")
    text = log.read_text()
    # Each task expanded its own SLURM_PROCID / SLURM_LOCALID: the batch shell has neither.
    assert re.search(r"ddpimg: task 0 \(node 0, local 0\) on \S+", text), text
    assert re.search(r"ddpimg: task 1 \(node 0, local 1\) on \S+", text), text
    assert "the training step ended with status 0" in text


def test_preempted_job_is_requeued_and_resumes_to_the_same_loss(
    tmp_path: Path, slurm_env: dict[str, str], uninterrupted: Path
) -> None:
    out = tmp_path / "run"
    job_id = submit(["--", *TRAIN, "--out", str(out)], slurm_env, tmp_path)
    log = tmp_path / f"ddpimg-{job_id}.out"
    wait_for_steps(out, 3)
    # What Slurm does at time limit minus --signal-seconds: USR2 to the batch shell only.
    run(["scancel", "--signal=USR2", "--batch", job_id], slurm_env, timeout=30)
    release_requeued(job_id, slurm_env, restarts=1)
    info = wait_for_end(job_id, slurm_env, log)
    text = log.read_text()
    assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "1"), text
    assert f"ddpimg: requeueing job {job_id} (restart 1 of 3)" in text
    assert "restart 1, nodes" in text
    assert list((out / "checkpoints").iterdir()), "no checkpoint was written"
    # --deterministic on the CPU: the resumed run repeats the uninterrupted one bit for bit.
    assert train_losses(out) == train_losses(uninterrupted / "run")
    assert summary(out)["eval_loss"] == summary(uninterrupted / "run")["eval_loss"]
    assert summary(out)["world_size"] == 2


FAKE_TRAINER = """\
import os, pathlib, signal, sys, time
# Stands in for train: waits for USR2, then exits with the preemption status.
got = []
signal.signal(signal.SIGUSR2, lambda *_: got.append(1))
out = pathlib.Path(sys.argv[1])
name = f"{os.environ.get('SLURM_RESTART_COUNT', '0')}-{os.environ['SLURM_PROCID']}"
(out / f"started-{name}").write_text("")
deadline = time.monotonic() + 60
while not got and time.monotonic() < deadline:
    time.sleep(0.1)
(out / f"signalled-{name}").write_text(str(bool(got)))
sys.exit(75)
"""


def test_requeues_stop_at_max_restarts(tmp_path: Path, slurm_env: dict[str, str]) -> None:
    fake = tmp_path / "fake_trainer.py"
    fake.write_text(FAKE_TRAINER)
    args = ["--max-restarts", "1", "--", command("python"), str(fake), str(tmp_path)]
    job_id = submit(args, slurm_env, tmp_path)
    log = tmp_path / f"ddpimg-{job_id}.out"
    for restarts in (0, 1):
        wait_until(
            f"both tasks started (restart {restarts})",
            lambda r=restarts: all((tmp_path / f"started-{r}-{t}").exists() for t in (0, 1)),
            limit_s=90,
        )
        run(["scancel", "--signal=USR2", "--batch", job_id], slurm_env, timeout=30)
        if restarts == 0:
            release_requeued(job_id, slurm_env, restarts=1)
    info = wait_for_end(job_id, slurm_env, log)
    text = log.read_text()
    assert (info["JobState"], info["Restarts"], info["ExitCode"]) == ("FAILED", "1", "75:0"), text
    # Every task got the forwarded USR2 both times.
    for name in ("0-0", "0-1", "1-0", "1-1"):
        assert (tmp_path / f"signalled-{name}").read_text() == "True"
    assert "was restarted 1 times (at most 1): not requeueing" in text


def test_a_script_failing_on_every_rank_is_not_requeued(
    tmp_path: Path, slurm_env: dict[str, str]
) -> None:
    """A script's own error on both ranks is exit status 1, not 5 ("a rank was lost"), so
    the job script does not requeue it to fail the same way up to --max-restarts times."""
    script = tmp_path / "bad.py"
    script.write_text('raise RuntimeError("Found no NVIDIA driver on your system")\n')
    out = tmp_path / "run"
    train = ["train", "--out", str(out), "--script", str(script)]
    job_id = submit(["--", *train], slurm_env, tmp_path)
    log = tmp_path / f"ddpimg-{job_id}.out"
    info = wait_for_end(job_id, slurm_env, log)
    text = log.read_text()
    assert (info["JobState"], info["Restarts"], info["ExitCode"]) == ("FAILED", "0", "1:0"), text
    assert "requeueing" not in text, text
    assert "a rank was lost" not in text, text
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["status"], manifest["exit_status"]) == ("failed", 1)


# A sweep of 3 points as one array, at most 2 tasks at once; the point of 150 steps is
# preempted once 3 are logged (long enough that the signal comes while it trains), the two
# short ones run to their end beside it.
SWEEP_TRAIN = [
    "train", "--data", "synthetic", "--epochs", "1", "--log-every", "1",
    "--global-batch-size", "32", "--train-samples", "4800", "--eval-samples", "64",
    "--seed", "11", "--preempt-check-every", "1",
]  # fmt: skip
SWEEP = ["--gpus-per-node", "1", "--sweep", "max-steps=150,4,5", "--max-parallel", "2"]


def array_tasks(job_id: str, env: dict[str, str]) -> dict[str, dict[str, str]]:
    """`scontrol show job` of an array job: each task's fields by its ArrayTaskId (the
    pending tasks share one record, `1-2%2`)."""
    proc = run(["scontrol", "show", "job", "-o", job_id], env, timeout=30)
    lines = [
        dict(w.split("=", 1) for w in line.split() if "=" in w) for line in proc.stdout.splitlines()
    ]
    return {fields["ArrayTaskId"]: fields for fields in lines if "ArrayTaskId" in fields}


def test_a_sweep_is_one_array_whose_preempted_task_goes_on_alone(
    tmp_path: Path, slurm_env: dict[str, str]
) -> None:
    job_id = submit([*SWEEP, "--", *SWEEP_TRAIN], slurm_env, tmp_path)
    wait_until(
        "the sweep's directory appears", lambda: any((tmp_path / "runs").glob("*/sweep.json"))
    )
    (sweep,) = (path.parent for path in (tmp_path / "runs").glob("*/sweep.json"))
    long = sweep / "max-steps=150"
    wait_for_steps(long, 3)
    run(["scancel", "--signal=USR2", "--batch", f"{job_id}_0"], slurm_env, timeout=30)
    release_requeued(f"{job_id}_0", slurm_env, restarts=1)
    tasks: dict[str, dict[str, str]] = {}

    def ended() -> bool:
        tasks.update(array_tasks(job_id, slurm_env))
        return sorted(tasks) == ["0", "1", "2"] and all(
            task["JobState"] in DONE for task in tasks.values()
        )

    wait_until(f"array {job_id} ends", ended)
    logs = {index: (tmp_path / f"ddpimg-{job_id}_{index}.out").read_text() for index in "012"}
    assert [(tasks[i]["JobState"], tasks[i]["Restarts"]) for i in "012"] == [
        ("COMPLETED", "1"), ("COMPLETED", "0"), ("COMPLETED", "0")
    ], logs  # fmt: skip
    assert f"ddpimg: requeueing job {job_id}_0 (restart 1 of 3)" in logs["0"]
    assert not [index for index in "12" if "requeueing" in logs[index]]
    points = {"max-steps=150": 150, "max-steps=4": 4, "max-steps=5": 5}
    assert sorted(path.name for path in sweep.iterdir() if path.is_dir()) == sorted(points)
    for name, steps in points.items():
        manifest = json.loads((sweep / name / "manifest.json").read_text())
        assert manifest["status"] == "completed", name
        assert manifest["arguments"]["max_steps"] == steps
        assert (manifest["resumed_from"] is not None) == (name == long.name), name
        assert summary(sweep / name)["steps"] == steps
    # The same sweep again: every point completed there, nothing is submitted.
    again = run([command("ddpimg"), *SBATCH, *SWEEP, "--", *SWEEP_TRAIN], slurm_env,
                cwd=tmp_path, timeout=60, check=False)  # fmt: skip
    assert again.returncode == 2, again.stderr
    assert f"every point of sweep {sweep.name} completed in runs/{sweep.name}" in again.stderr
    laptop = slurm_env | {"XDG_STATE_HOME": str(tmp_path / "state")}  # nothing submitted
    listed = run([command("ddpimg"), "runs", "--json"], laptop, cwd=tmp_path).stdout
    (row,) = [json.loads(line) for line in listed.splitlines()]
    assert (row["name"], row["kind"], row["completed"], row["failed"]) == (
        sweep.name,
        "sweep",
        3,
        0,
    )
