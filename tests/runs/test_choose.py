"""Rank 0's choice of a run directory for a run without --out: a new directory, or the
earlier run it continues, by the rules of ddpimg.runs (docs/usage.md, "Run directories")."""

from __future__ import annotations

import fcntl
import io
import json
import os
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.runs import lock
from ddpimg.runs.choose import choose_run_dir
from tests.runs.test_records import TRAIN, make_run

NOW = datetime(2026, 11, 29, 3, 15, 0)
JOB = {"SLURM_JOB_ID": "4242"}


@pytest.fixture(autouse=True)
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The locks this test's choices took, released at its end (a run holds its own for the
    rest of its process)."""
    taken: list[int] = []
    monkeypatch.setattr(lock, "_held", taken)
    yield taken
    release(taken)


def release(taken: list[int]) -> None:
    """What a run's exit does to its locks."""
    while taken:
        os.close(taken.pop())


def same_lr(lr: float) -> Any:
    return lambda manifest: manifest.get("lr") == lr


def run_of(path: Path, status: str, lr: float = 1.0) -> Path:
    make_run(path, status, TRAIN)
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps(manifest | {"lr": lr}))
    return path


def choose(
    root: Path, resume: str = "auto", env: Mapping[str, str] | None = None, lr: float = 1.0
) -> tuple[Path, str]:
    said = io.StringIO()
    chosen = choose_run_dir(
        root, "mnist", same_lr(lr), resume=resume, env=env or {}, stream=said, now=NOW
    )
    return chosen, said.getvalue()


def test_a_first_run_gets_a_new_directory_named_by_its_start(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    chosen, said = choose(root)
    assert chosen == root / "mnist-20261129-031500"
    assert chosen.is_dir()
    assert not any(p.name != lock.LOCK_NAME for p in chosen.iterdir())
    assert os.readlink(root / "latest") == "mnist-20261129-031500"
    assert said == f"ddpimg: new run directory {chosen} ({root}/latest points to it)\n"


def test_runs_started_in_the_same_second_get_their_own_directories(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    first, _ = choose(root, lr=0.5)
    second, _ = choose(root, lr=0.25)
    assert (first.name, second.name) == ("mnist-20261129-031500", "mnist-20261129-031500.2")
    assert os.readlink(root / "latest") == second.name


def test_the_newest_run_of_the_same_options_that_did_not_complete_continues(
    tmp_path: Path,
) -> None:
    root = tmp_path / "runs"
    run_of(root / "mnist-20261128-100000", "interrupted")
    stopped = run_of(root / "mnist-20261128-120000", "interrupted")
    run_of(root / "mnist-20261128-130000", "completed", lr=0.5)  # other options
    run_of(root / "gpt-20261128-140000", "interrupted")  # another trainer's name
    chosen, said = choose(root)
    assert chosen == stopped
    assert said == (
        f"ddpimg: continuing {stopped}, the newest run of these options (interrupted at "
        "step 3); --resume none starts a new one\n"
    )
    assert os.readlink(root / "latest") == stopped.name


@pytest.mark.parametrize("newest", ["completed", "held"])
def test_no_earlier_run_continues_when_the_newest_completed_or_is_held(
    tmp_path: Path, newest: str
) -> None:
    root = tmp_path / "runs"
    run_of(root / "mnist-20261128-100000", "interrupted")
    last = run_of(
        root / "mnist-20261128-120000", "completed" if newest == "completed" else "running"
    )
    if newest == "held":  # the same command, still running in another terminal
        descriptor = os.open(last / lock.LOCK_NAME, os.O_RDWR | os.O_CREAT)
        fcntl.flock(descriptor, fcntl.LOCK_EX)
    chosen, _ = choose(root)
    assert chosen == root / "mnist-20261129-031500"
    if newest == "held":
        os.close(descriptor)


@pytest.mark.parametrize("resume", ["none", "/runs/x/checkpoints/step-00000004"])
def test_resume_none_or_a_checkpoint_starts_a_new_directory(tmp_path: Path, resume: str) -> None:
    root = tmp_path / "runs"
    run_of(root / "mnist-20261128-120000", "preempted")
    assert choose(root, resume)[0] == root / "mnist-20261129-031500"


def test_a_job_continues_its_own_run(tmp_path: Path, held: list[int]) -> None:
    root = tmp_path / "runs"
    run_of(root / "mnist-4242", "completed", lr=0.5)  # an earlier step of the job
    mine = run_of(root / "mnist-4242.2", "preempted")
    run_of(root / "mnist-4343", "preempted")  # another job's
    run_of(root / "mnist-20261129-000000", "interrupted")  # started outside a scheduler
    chosen, said = choose(root, env=JOB)
    assert chosen == mine
    assert said.startswith(f"ddpimg: continuing {mine}, job 4242's run of these options (preempted")
    # Given a checkpoint, a requeued job still takes its own directory.
    release(held)
    assert choose(root, "/x/checkpoints/step-00000004", env=JOB)[0] == mine


def test_a_job_whose_run_completed_or_ran_other_options_gets_a_new_one(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run_of(root / "mnist-4242", "completed")
    run_of(root / "mnist-4242.2", "interrupted", lr=0.5)
    assert choose(root, env=JOB)[0] == root / "mnist-4242.3"
    assert choose(root, env={"SLURM_JOB_ID": "7"})[0] == root / "mnist-7"


def test_an_array_task_is_named_by_the_array_and_its_task(tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "4250", "SLURM_ARRAY_JOB_ID": "4242", "SLURM_ARRAY_TASK_ID": "8"}
    assert choose(tmp_path / "runs", env=env)[0] == tmp_path / "runs" / "mnist-4242_8"


def test_runs_of_a_scheduler_are_not_continued_outside_one(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run_of(root / "mnist-4242", "preempted")  # may be waiting for its requeue
    assert choose(root)[0] == root / "mnist-20261129-031500"


def test_a_directory_nobody_can_write_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "file"
    root.write_text("not a directory")
    with pytest.raises(DdpimgError, match=rf"cannot create the runs directory {root} \(") as err:
        choose(root)
    assert err.value.hint is not None
    assert "DDPIMG_RUNS" in err.value.hint


def test_a_latest_that_is_not_a_link_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    (root / "latest").mkdir(parents=True)
    chosen, said = choose(root)
    assert (root / "latest").is_dir()
    assert not (root / "latest").is_symlink()
    assert said == (
        f"ddpimg: warning: {root}/latest left as it is ({root}/latest is not a link ddpimg "
        f"made); the run is in {chosen}\nddpimg: new run directory {chosen}\n"
    )
