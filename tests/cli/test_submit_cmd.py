"""ddpimg submit, follow, fetch, cancel and runs from the command line, the login node a
local one behind a stand-in for ssh (the real client and sshd: tests/multinode/
test_remote.py): what a user types and reads, and what is refused before anything connects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpimg.cli import build_parser, main
from ddpimg.cli.submit_cmd import job_words
from tests.remote.fakes import LocalLogin

# ssh as the laptop runs it: the master waits (its control "socket" holds its pid), -O exit
# ends it, any other call runs its command line on the local login node.
FAKE_SSH = """\
#!/bin/sh
printf '%s\\n' "$*" >> "$(dirname "$0")/calls"
for a in "$@"; do case "$a" in ControlPath=*) sock="${a#ControlPath=}" ;; esac; done
case " $* " in
    *" ControlMaster=yes "*) echo $$ > "$sock"; exec sleep 300 ;;
    *" -O exit "*) kill "$(cat "$sock")"; rm -f "$sock"; exit 0 ;;
esac
for last in "$@"; do :; done
cd "@HOME@" && exec env -i HOME="@HOME@" PATH="@PATH@" PYTHONPATH="@PYTHONPATH@" /bin/sh -c "$last"
"""


@pytest.fixture
def laptop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalLogin:
    login = LocalLogin(tmp_path / "login")
    ssh = tmp_path / "laptop-bin" / "ssh"
    ssh.parent.mkdir()
    source = str(Path(__file__).resolve().parents[2] / "src")
    text = FAKE_SSH.replace("@HOME@", str(login.home)).replace("@PATH@", login.path)
    ssh.write_text(text.replace("@PYTHONPATH@", source))
    ssh.chmod(0o755)
    monkeypatch.setenv("DDPIMG_SSH_COMMAND", str(ssh))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("DDPIMG_RUNS", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return login


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "laptop-bin" / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_submit_follow_fetch_cancel_and_runs(
    laptop: LocalLogin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("train.py").write_text("print(1)\n")
    job = [
        "--runtime",
        "none",
        "--gpu-request",
        "none",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--time",
        "10",
    ]
    status = main(
        [
            "submit",
            "--host",
            "login",
            "--site",
            "local",
            "--include",
            "train.py",
            *job,
            "--",
            "train",
            "--script",
            "train.py",
        ]
    )
    out, err = capsys.readouterr()
    assert status == 0, err
    assert out == "train-4242\n"
    assert err.splitlines()[1:3] == [
        "ddpimg: login: staged 1 files (9 B, --include): 1 new (9 B), 0 already there",
        f"ddpimg: login: submitted job 4242, run train-4242 (in {laptop.home}/ddpimg-remote/jobs/"
        + err.split("/ddpimg-remote/jobs/")[1].split(")")[0]
        + ")",
    ]
    masters = [call for call in calls(tmp_path) if "ControlMaster=yes" in call]
    assert len(masters) == 1, "one connection for the whole command"

    workdir = next((laptop.home / "ddpimg-remote" / "jobs").iterdir())
    rundir = workdir / "runs" / "train-4242"
    rundir.mkdir(parents=True)
    (rundir / "manifest.json").write_text(
        json.dumps({"status": "completed", "exit_status": 0, "started_utc": "2026-11-29T03:15:00Z"})
    )
    (rundir / "metrics.jsonl").write_text('{"kind": "summary", "steps": 5, "final_loss": 0.5}\n')
    (workdir / "ddpimg-4242.out").write_text("log\n")
    laptop.job("JobId=4242 JobState=COMPLETED Reason=None NodeList=node1 Restarts=0 ExitCode=0:0")
    assert main(["follow", "latest", "--interval", "0.1"]) == 0
    out, err = capsys.readouterr()
    completed = "COMPLETED (exit 0:0): the run completed: 5 steps, final loss 0.5000"
    assert out == f"ddpimg: train-4242: {completed}\n"
    assert main(["fetch", "train-4242"]) == 0
    err = capsys.readouterr().err
    assert "ddpimg: fetched train-4242 into " in err
    assert "runs/train-4242: 4 files" in err
    assert sorted(p.name for p in Path("runs/train-4242").iterdir() if p.name != "plot.png") == [
        "ddpimg-4242.out",
        "job.sh",
        "manifest.json",
        "metrics.jsonl",
    ]
    assert main(["cancel", "train-4242"]) == 0
    assert (laptop.fake / "cancelled").read_text() == "4242\n"
    assert main(["runs"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 2
    assert table[1].split()[:4] == ["train-4242", "completed", "5", "0.5"]
    assert table[1].endswith(f"login:{workdir}/runs/train-4242")


def test_a_tree_too_large_is_refused_before_connecting(
    laptop: LocalLogin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("data.bin").write_bytes(b"\0" * 1_500_000)
    status = main(
        ["submit", "--host", "login", "--include", ".", "--max-stage-size", "1", "--", "train"]
    )
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("ddpimg: error: the tree to stage (")
    assert (
        "is 1.5 MB in 1 files, more than --max-stage-size 1 MB (largest: data.bin (1.5 MB))" in err
    )
    assert "  hint: leave data and outputs out of it" in err
    assert calls(tmp_path) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--interval", "0", "--", "train"], "--interval 0: must be positive"),
        (
            ["--", "train", "--script", "missing.py"],
            "train --script missing.py: missing.py is not in the tree",
        ),
        (
            ["--remote-ddpimg", "'x", "--", "train"],
            '--remote-ddpimg "\'x": cannot be split into words',
        ),
        (["--"], "no command after --"),
    ],
)
def test_what_is_refused_before_connecting(
    laptop: LocalLogin,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    assert main(["submit", "--host", "login", *argv]) == 2
    assert message in capsys.readouterr().err
    assert calls(tmp_path) == []


def test_a_record_of_runs_that_cannot_be_read_is_refused_before_connecting(
    laptop: LocalLogin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Read after sbatch, it would leave a job queued that nothing here names."""
    record = tmp_path / "state" / "ddpimg" / "remote-runs.json"
    record.parent.mkdir(parents=True)
    record.write_text("[" * 100_000)
    Path("train.py").write_text("print(1)\n")
    assert main(["submit", "--host", "login", "--include", "train.py", "--", "train"]) == 2
    assert f"{record}" in capsys.readouterr().err
    assert calls(tmp_path) == []


def test_job_options_reach_ddpimg_sbatch_as_given() -> None:
    args = build_parser("submit").parse_args(
        [
            "submit",
            "--host",
            "h",
            "--nodes",
            "1-2",
            "--bind",
            "/a",
            "--bind",
            "/b",
            "--sbatch-option=--hold",
            "--job-name",
            "x",
            "--allow-retired",
            "--",
            "train",
        ]
    )
    assert job_words(args) == [
        "--nodes=2",
        "--min-nodes=1",
        "--job-name=x",
        "--bind=/a",
        "--bind=/b",
        "--sbatch-option=--hold",
        "--allow-retired",
    ]
    with pytest.raises(SystemExit):
        build_parser("submit").parse_args(["submit", "--host", "h", "--array", "0-3"])


def test_the_commands_need_a_run_submitted_from_here(
    laptop: LocalLogin, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("follow", "fetch", "cancel"):
        assert main([command, "latest"]) == 2
        assert (
            "latest: no run of that name was submitted from here (newest: none yet)"
            in capsys.readouterr().err
        )


def test_no_torch_is_imported_by_the_laptops_commands() -> None:
    code = (
        "import sys; from ddpimg.cli import build_parser\n"
        "for name in ('submit', 'follow', 'fetch', 'cancel'): build_parser(name)\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False"
