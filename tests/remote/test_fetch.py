"""fetch from a (local, fake) login node: the run's files, its trackers' folders, the job's
log and script, the newest checkpoint only when asked, into the run's local directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.remote.fetch import accepted, fetch_run
from ddpimg.remote.state import RemoteRun
from tests.remote.fakes import LocalLogin


def remote_run(login: LocalLogin, local: Path) -> RemoteRun:
    work = login.home / "jobs" / "j" / "exp"
    return RemoteRun(
        name="mnist-7",
        host="login",
        job_id="7",
        job_dir=str(work.parent),
        workdir=str(work),
        run_dir=f"{work}/runs/7",
        log=f"{work}/ddpimg-7.out",
        submitted_utc="x",
        site="local",
        command=("train",),
        local_dir=str(local),
    )


def make_run(run: RemoteRun) -> None:
    rundir = Path(run.run_dir)
    for name in (
        "manifest.json",
        "metrics.jsonl",
        "trackers.json",
        "loss.png",
        "notes.txt",
        "wandb/offline-run/run.wandb",
        "checkpoints/step-00000004/model.pt",
        "checkpoints/step-99999999/model.pt",
        "checkpoints/step-100000000/model.pt",  # newest: by its number, not as text
        "checkpoints/.step-100000001.tmp/x",
    ):
        (rundir / name).parent.mkdir(parents=True, exist_ok=True)
        (rundir / name).write_text(name)
    Path(run.log).write_text("log\n")
    (Path(run.job_dir) / "job.sh").write_text("#!/bin/bash\n")


def test_the_runs_files_and_the_newest_checkpoint_when_asked(tmp_path: Path) -> None:
    login = LocalLogin(tmp_path / "login")
    local = tmp_path / "runs" / "mnist-7"
    run = remote_run(login, local)
    make_run(run)
    fetched = fetch_run(login, run, local, checkpoints=False, max_bytes=10**6)
    assert sorted(fetched.unpacked.written) == [
        "ddpimg-7.out",
        "job.sh",
        "loss.png",
        "manifest.json",
        "metrics.jsonl",
        "trackers.json",
        "wandb/offline-run/run.wandb",
    ]
    assert fetched.checkpoint is None
    assert fetched.unpacked.skipped == []
    fetched = fetch_run(login, run, local, checkpoints=True, max_bytes=10**6)
    assert fetched.checkpoint == "step-100000000"
    newest = local / "checkpoints" / "step-100000000" / "model.pt"
    assert newest.read_text().endswith("model.pt")
    assert [path.name for path in (local / "checkpoints").iterdir()] == ["step-100000000"]
    assert not (local / "notes.txt").exists()


def test_nothing_there_is_an_error_that_says_so(tmp_path: Path) -> None:
    login = LocalLogin(tmp_path / "login")
    run = remote_run(login, tmp_path / "local")
    with pytest.raises(DdpimgError, match="login: nothing of run mnist-7 to fetch: no /") as found:
        fetch_run(login, run, tmp_path / "local", checkpoints=False, max_bytes=100)
    assert "ddpimg follow mnist-7" in str(found.value)


def test_one_checkpoint_folder_at_most() -> None:
    run = RemoteRun("n", "h", "7", "/j", "/w", "/w/r", "/w/x-7.out", "t", "s", ("train",), "/l")
    accept, seen = accepted(run, checkpoints=True)
    assert accept("checkpoints/step-00000008/a")
    assert not accept("checkpoints/step-00000004/a")
    assert not accept("checkpoints/step-8/a")
    assert not accept("checkpoints/step-00000008")
    assert seen == ["step-00000008"]
    assert accept("x-7.out")
    assert accept("mlruns/0/meta.yaml")
    assert not accept("other/x")
    assert not accepted(run, checkpoints=False)[0]("checkpoints/step-00000008/a")


@pytest.mark.parametrize(
    ("output", "made"),
    [
        ("%u-%j.out", "{user}-7.out"),  # Slurm's %u: the user (the login's own)
        ("logs/%N-%x-%j.out", "logs/node007-mnist-7.out"),  # %N: known only on the cluster
        ("%x-%j-100%%.txt", "mnist-7-100%.txt"),
    ],
)
def test_the_log_is_found_whatever_output_pattern_made_it(
    tmp_path: Path, output: str, made: str
) -> None:
    """Issue 54: fetch took the log from the path submit expected, and missed one whose
    --output pattern held %u or %N (or came through --sbatch-option)."""
    import getpass
    from dataclasses import replace

    from ddpimg.remote.submit import log_for

    login = LocalLogin(tmp_path / "login")
    local = tmp_path / "runs" / "mnist-7"
    run = remote_run(login, local)
    make_run(replace(run, log=f"{run.workdir}/other-7.out"))
    run = replace(run, log=log_for(run.workdir, "7", output, "mnist"))
    log = Path(run.workdir) / made.format(user=getpass.getuser())
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("the job's log\n")
    fetched = fetch_run(login, run, local, checkpoints=False, max_bytes=10**6)
    assert log.name in fetched.unpacked.written
    assert (local / log.name).read_text() == "the job's log\n"
    assert fetched.unpacked.skipped == []


def test_of_several_files_the_pattern_names_the_newest_comes(tmp_path: Path) -> None:
    """A requeued job on another first node writes a second log (%N): the newest is the
    one that says how the run ended."""
    import os
    from dataclasses import replace

    login = LocalLogin(tmp_path / "login")
    local = tmp_path / "runs" / "mnist-7"
    run = replace(remote_run(login, tmp_path / "local"), log="/nowhere")
    run = replace(run, log=f"{run.workdir}/%N-7.out")
    make_run(replace(run, log=f"{run.workdir}/n1-7.out"))
    newer = Path(run.workdir) / "n2-7.out"
    newer.write_text("second start\n")
    os.utime(Path(run.workdir) / "n1-7.out", (1_000_000, 1_000_000))
    fetched = fetch_run(login, run, local, checkpoints=False, max_bytes=10**6)
    assert "n2-7.out" in fetched.unpacked.written
    assert "n1-7.out" not in fetched.unpacked.written
