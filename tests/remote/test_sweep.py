"""A sweep from the laptop on a (local, fake) login node: submitted as one array rendered
there by ddpimg sbatch --sweep, Slurm's view of its tasks read without trusting it, followed
poll by poll to its verdict, and fetched point by point."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from ddpimg.cli.submit_cmd import sweep_command, sweep_words
from ddpimg.remote.fetch import fetch_sweep
from ddpimg.remote.follow import Ended
from ddpimg.remote.jobinfo import parse_array, task_ids
from ddpimg.remote.login import check_login
from ddpimg.remote.state import RemoteRun
from ddpimg.remote.submit import Request, submit
from ddpimg.remote.sweep_follow import SweepFollower, TableScreen
from ddpimg.remote.tree import Limits, collect_tree
from tests.remote.fakes import LocalLogin
from tests.remote.test_follow import INTERVAL_S, Life, both, write
from tests.remote.test_submit import JOB, NOW, tree_of

TASK = (
    "JobId={id} ArrayJobId=7 ArrayTaskId={task} JobState={state} Restarts={restarts} ExitCode=0:0"
)


def task(task: str, state: str, restarts: int = 0, job_id: int = 7) -> str:
    return TASK.format(id=job_id, task=task, state=state, restarts=restarts)


@pytest.mark.parametrize(
    ("text", "ids"),
    [("3", [3]), ("1,3", [1, 3]), ("2-5%2", [2, 3, 4, 5]), ("0-1,4", [0, 1, 4]),
     ("5-2", []), ("1-", []), ("0-99999999", [])],
)  # fmt: skip
def test_task_ids(text: str, ids: list[int]) -> None:
    assert task_ids(text) == ids


def test_an_arrays_tasks_by_index() -> None:
    said = "\n".join(
        [task("2-3%2", "PENDING"), task("1", "RUNNING", job_id=9), task("0", "COMPLETED", job_id=8),
         "JobId=12 ArrayJobId=77 ArrayTaskId=0 JobState=FAILED", "JobId=13 JobState=RUNNING",
         task("4;id", "RUNNING")]
    )  # fmt: skip
    tasks = parse_array(said, "7")
    assert {index: info.state for index, info in tasks.items()} == {
        0: "COMPLETED", 1: "RUNNING", 2: "PENDING", 3: "PENDING"
    }  # fmt: skip


def sweep_args(*texts: str) -> argparse.Namespace:
    return argparse.Namespace(
        sweep=list(texts), trials=None, sweep_seed=None, max_points=1000, max_parallel=2
    )


def test_a_sweep_is_submitted_as_one_array_rendered_there(tmp_path: Path) -> None:
    login = LocalLogin(tmp_path / "login")
    exp = tree_of(tmp_path)
    args = sweep_args("lr=0.1,0.01")
    command, points = sweep_command(args, ["train", "--script", "train.py", "--lr={lr}"], {})
    assert points == ("lr=0.1", "lr=0.01")
    assert command[:3] == ["train", "--out", command[2]]
    assert command[2].startswith("runs/train-lr-")
    request = Request("local", "remote", (*JOB, *sweep_words(args)), tuple(command),
                      points=points)  # fmt: skip
    run = submit(login, check_login(login, None, "local"), collect_tree(exp, (), Limits()),
                 request, local_root=tmp_path / "runs", say=lambda _: None, now=NOW)  # fmt: skip
    assert (run.name, run.points) == ("train-sweep-4242", points)
    assert run.run_dir == f"{run.workdir}/{command[2]}"
    assert run.log == f"{run.workdir}/ddpimg-4242_%a.out"
    script = (login.fake / "submitted.sh").read_text()
    assert "#SBATCH --array=0-1%2\n" in script
    assert f'0) out={command[2]}/lr=0.1; point=(--out "$out" --script train.py --lr=0.1) ;;' in (
        script
    )
    subprocess.run(["bash", "-n", str(login.fake / "submitted.sh")], check=True, timeout=30)


def sweep_run(login: LocalLogin, points: tuple[str, ...]) -> RemoteRun:
    work = login.home / "jobs" / "j" / "exp"
    (work / "runs" / "s").mkdir(parents=True)
    return RemoteRun(
        name="mnist-sweep-7", host="login", job_id="7", job_dir=str(work.parent),
        workdir=str(work), run_dir=f"{work}/runs/s", log=f"{work}/ddpimg-7_%a.out",
        submitted_utc="x", site="local", command=("train",), local_dir="/nowhere",
        points=points,
    )  # fmt: skip


def finish(path: Path, status: str, eval_loss: float | None = None, steps: int = 4) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "manifest.json").write_text(json.dumps({"status": status, "exit_status": 0}))
    lines = [{"kind": "train", "step": steps, "loss": 1.0}]
    if eval_loss is not None:
        lines.append({"kind": "summary", "steps": steps, "final_loss": 1.0, "eval_loss": eval_loss})
    (path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def follow_sweep(login: LocalLogin, run: RemoteRun, life: Life) -> tuple[Ended, list[str]]:
    out = io.StringIO()
    follower = SweepFollower(
        login, run, TableScreen(out, False), reconnect=lambda: None, interval_s=INTERVAL_S,
        give_up_s=30.0, clock=life.clock, sleep=life.sleep,
    )  # fmt: skip
    ended = follower.follow()
    return ended, out.getvalue().splitlines()


def test_a_sweep_followed_to_its_verdict(tmp_path: Path) -> None:
    login = LocalLogin(tmp_path / "login")
    run = sweep_run(login, ("lr=0.1", "lr=0.01"))
    base = Path(run.run_dir)

    def state(*lines: str) -> Callable[[], None]:
        return lambda: login.job("\n".join(lines))

    login.job(task("0-1%2", "PENDING"))
    preempted = {
        "status": "preempted",
        "exit_status": 75,
        "preemption": {
            "cause": "SIGUSR2",
            "step": 2,
            "checkpoint": f"{base}/lr=0.1/checkpoints/step-00000002",
        },
    }
    steps: list[Callable[[], None]] = [
        state(task("0", "RUNNING", job_id=8), task("1", "PENDING")),
        both(
            (base / "lr=0.1").mkdir,
            write(base / "lr=0.1" / "manifest.json", json.dumps(preempted)),
            state(task("0", "PENDING", restarts=1, job_id=8), task("1", "RUNNING", job_id=9)),
        ),
        both(
            lambda: finish(base / "lr=0.01", "completed", 0.5),
            state(task("0", "RUNNING", restarts=1, job_id=8), task("1", "COMPLETED", job_id=9)),
        ),
        both(
            lambda: finish(base / "lr=0.1", "completed", 0.25),
            state(task("0", "COMPLETED", restarts=1, job_id=8), task("1", "COMPLETED", job_id=9)),
        ),
    ]
    ended, lines = follow_sweep(login, run, Life(login, steps))
    assert ended == Ended("COMPLETED", "2/2 completed", None, 0.25, True)
    said = [line for line in lines if line.startswith("ddpimg: ")]
    assert said == [
        "ddpimg: mnist-sweep-7: lr=0.1: PENDING",
        "ddpimg: mnist-sweep-7: lr=0.01: PENDING",
        "ddpimg: mnist-sweep-7: lr=0.1: RUNNING",
        "ddpimg: mnist-sweep-7: lr=0.1: REQUEUED (restart 1): the run preempted (SIGUSR2) after "
        "step 2, checkpoint step-00000002 (exit 75)",
        "ddpimg: mnist-sweep-7: lr=0.1: PENDING (restart 1)",
        "ddpimg: mnist-sweep-7: lr=0.01: RUNNING",
        "ddpimg: mnist-sweep-7: lr=0.1: RUNNING (restart 1)",
        "ddpimg: mnist-sweep-7: lr=0.01: COMPLETED: the run completed: 4 steps, final loss "
        "1.0000, eval loss 0.5000",
        "ddpimg: mnist-sweep-7: lr=0.1: COMPLETED (restart 1): the run completed: 4 steps, final "
        "loss 1.0000, eval loss 0.2500",
        "ddpimg: mnist-sweep-7: COMPLETED: 2/2 completed; best lr=0.1 (eval loss 0.25)",
    ]
    table = [line for line in lines if not line.startswith("ddpimg: ")]
    assert table == [
        "  point    job                    status     steps  loss  eval loss",
        "* lr=0.1   COMPLETED (restart 1)  completed      4     1       0.25",
        "  lr=0.01  COMPLETED              completed      4     1        0.5",
        "mnist-sweep-7: 2/2 completed; best lr=0.1 (eval loss 0.25)",
    ]


def test_on_a_terminal_the_table_is_redrawn_in_place(tmp_path: Path) -> None:
    screen = TableScreen(io.StringIO(), True)
    screen.table(["a", "b"])
    screen.line("said")
    screen.table(["c", "d"])
    assert screen.stream.getvalue() == (  # type: ignore[attr-defined]
        "a\nb\n\x1b[2F\x1b[Jsaid\na\nb\n\x1b[2F\x1b[Jc\nd\n"
    )


def test_a_failed_point_fails_the_sweep(tmp_path: Path) -> None:
    login = LocalLogin(tmp_path / "login")
    run = sweep_run(login, ("x=1", "x=2"))
    base = Path(run.run_dir)
    finish(base / "x=1", "completed", 0.5)
    finish(base / "x=2", "failed")
    login.job("\n".join([task("0", "COMPLETED", job_id=8), task("1", "FAILED", job_id=9)]))
    ended, lines = follow_sweep(login, run, Life(login, []))
    assert (ended.state, ended.status, ended.ok) == ("FAILED", "1/2 completed, 1 failed", False)
    assert lines[-2:] == [
        "ddpimg: mnist-sweep-7: x=2: the run failed (exit 0)",
        "ddpimg: mnist-sweep-7: FAILED: 1/2 completed, 1 failed; best x=1 (eval loss 0.5)",
    ]


def test_a_sweep_is_fetched_point_by_point(tmp_path: Path) -> None:
    login = LocalLogin(tmp_path / "login")
    run = sweep_run(login, ("x=1", "x=2", "x=3"))
    base = Path(run.run_dir)
    (base / "sweep.json").write_text("{}")
    (Path(run.job_dir) / "job.sh").write_text("#!/bin/bash\n")
    finish(base / "x=1", "completed", 0.5)
    finish(base / "x=2", "running")
    (base / "x=2" / "secret.txt").write_text("not asked for")
    Path(run.workdir, "ddpimg-7_1.out").write_text("log of task 1\n")
    local = tmp_path / "runs" / "mnist-sweep-7"
    fetched = fetch_sweep(login, run, local, checkpoints=False, max_bytes=10**6)
    assert sorted(fetched.sweep.unpacked.written) == ["job.sh", "sweep.json"]
    assert sorted(fetched.points) == ["x=1", "x=2"]
    assert fetched.missing == ["x=3"]
    assert sorted(fetched.points["x=2"].unpacked.written) == [
        "ddpimg-7_1.out", "manifest.json", "metrics.jsonl"
    ]  # fmt: skip
    assert (local / "x=2" / "ddpimg-7_1.out").read_text() == "log of task 1\n"
    assert not (local / "x=2" / "secret.txt").exists()
