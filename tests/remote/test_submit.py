"""submit on a (local, fake) login node: the job rendered there by ddpimg sbatch from the
staged tree, every value reaching its script quoted; where the run will be; what makes the
answer a job id."""

from __future__ import annotations

import shlex
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.remote.login import check_login
from ddpimg.remote.submit import (
    Request,
    check_command,
    log_for,
    log_options,
    run_dir_for,
    stem_for,
    submit,
)
from ddpimg.remote.tree import Limits, collect_tree
from tests.remote.fakes import LocalLogin

JOB = ("--runtime=none", "--gpu-request=none", "--nodes=1", "--gpus-per-node=2", "--time=10")
NOW = datetime(2026, 11, 29, 3, 15, tzinfo=timezone.utc)


def tree_of(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "exp").mkdir(parents=True)
    (root / "exp" / "train.py").write_text("print(1)\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, timeout=30)
    return root / "exp"


def test_the_job_is_rendered_there_with_every_value_quoted(tmp_path: Path) -> None:
    login = LocalLogin(tmp_path / "login")
    exp = tree_of(tmp_path)
    canary = tmp_path / "pwned"
    tree = collect_tree(exp, (), Limits())
    hostile = f"$(touch {canary})"
    command = ("train", "--script", "train.py", "--lr", f"0.1;touch {canary}", hostile, "it's")
    named = f"--job-name=a$(touch${{IFS}}{canary})b"  # one word, as a job name must be
    request = Request("local", "remote", (*JOB, named), command, job_name="x")
    said: list[str] = []
    run = submit(
        login,
        check_login(login, None, "local"),
        tree,
        request,
        local_root=tmp_path / "runs",
        say=said.append,
        now=NOW,
    )
    assert (run.name, run.job_id, run.site, run.state) == (
        "train-4242",
        "4242",
        "local",
        "SUBMITTED",
    )
    assert run.workdir == f"{run.job_dir}/exp"
    assert run.job_dir.startswith(f"{login.home}/remote/jobs/train-")
    assert run.run_dir == f"{run.workdir}/runs/train-4242"
    assert run.log == f"{run.workdir}/x-4242.out"
    assert run.local_dir == str(tmp_path / "runs" / "train-4242")
    assert run.submitted_utc == "2026-11-29T03:15:00Z"
    assert said[0].startswith("staged 1 files (9 B, git): 1 new (9 B), 0 already there")
    script = (login.fake / "submitted.sh").read_text()
    assert "train --site local --script train.py --lr " + shlex.join(command[4:]) in script
    assert "#SBATCH --job-name=a$(touch" in script  # a directive's word, never run
    assert not canary.exists()
    subprocess.run(["bash", "-n", str(login.fake / "submitted.sh")], check=True, timeout=30)


def test_what_sbatch_refuses_is_said_and_an_answer_that_is_no_job_id_too(tmp_path: Path) -> None:
    login = LocalLogin(tmp_path / "login")
    tree = collect_tree(tree_of(tmp_path), (), Limits())
    node = check_login(login, None, "local")
    request = Request("local", "remote", ("--runtime=none",), ("train",))
    with pytest.raises(
        DdpimgError,
        match="login: ddpimg sbatch did not submit the job: ddpimg: "
        "error: the number of nodes is not given",
    ) as found:
        submit(login, node, tree, request, local_root=tmp_path, say=print)
    assert "the staged tree stays in remote/jobs/mnist-" in str(found.value)
    (login.fake / "next-id").write_text("\x1b[2J99\n")
    request = Request("local", "remote", JOB, ("train",))
    with pytest.raises(
        DdpimgError,
        match=r"answer is not a job id and a directory \(job id "
        r"'\\x1b\[2J99', directory '/",
    ):
        submit(login, node, tree, request, local_root=tmp_path, say=print)


@pytest.mark.parametrize(
    ("command", "stem"),
    [
        (["train"], "mnist"),
        (["train", "gpt", "--epochs", "1"], "gpt"),
        (["ddpimg", "train", "--max-steps", "1", "resnet"], "resnet"),
        (["train", "--script", "my model.py", "gpt"], "my_model"),
        (["ddpimg", "doctor"], "ddpimg"),
        (["python", "x.py"], "python"),
    ],
)
def test_stem_for(command: list[str], stem: str) -> None:
    assert stem_for(command) == stem


@pytest.mark.parametrize(
    ("command", "run_dir"),
    [
        (["train"], "/w/runs/7"),
        (["train", "--out", "o"], "/w/o"),
        (["train", "--out=/abs"], "/abs"),
        (["train", "--script", "a.py"], "/w/runs/a-7"),
        (["train", "--out", "x", "--script", "a.py"], "/w/x"),
        (["ddpimg", "doctor"], ""),
    ],
)
def test_where_the_run_will_be(command: list[str], run_dir: str) -> None:
    assert run_dir_for(command, "/w", "7") == run_dir


@pytest.mark.parametrize(
    ("output", "name", "log"),
    [
        (None, None, "/w/ddpimg-7.out"),
        ("logs/%x-%j.txt", "mine", "/w/logs/mine-7.txt"),
        ("/abs/%A_100%%.out", None, "/abs/7_100%%.out"),
        ("%N.out", None, "/w/%N.out"),
        ("%u/%x-%5j.log", None, "/w/%u/ddpimg-00007.log"),
    ],
)
def test_the_log_from_the_output_pattern(output: str | None, name: str | None, log: str) -> None:
    assert log_for("/w", "7", output, name) == log


@pytest.mark.parametrize(
    ("given", "sbatch_options", "expected"),
    [
        ((None, None), (), (None, None)),
        (("a-%j.out", "n"), (), ("a-%j.out", "n")),
        ((None, None), ("--qos=normal", "--output=logs/%N-%j.out"), ("logs/%N-%j.out", None)),
        (("a.out", "n"), ("-ob.out", "-Jjob", "--output=c.out"), ("c.out", "job")),
        ((None, "n"), ("--job-name=other",), (None, "other")),
    ],
)
def test_the_logs_options_given_through_sbatch_option_win(
    given: tuple[str | None, str | None],
    sbatch_options: tuple[str, ...],
    expected: tuple[str | None, str | None],
) -> None:
    """ddpimg sbatch writes the --sbatch-option lines after its own: the last one counts."""
    assert log_options(*given, sbatch_options) == expected


def test_a_script_must_be_in_the_staged_tree(tmp_path: Path) -> None:
    exp = tree_of(tmp_path)
    (exp / "ignored.py").write_text("")
    (exp.parent / ".gitignore").write_text("ignored.py\n")
    tree = collect_tree(exp, (), Limits())
    check_command(["train", "--script", "train.py"], tree)
    check_command(["train", "--script", "/cluster/own.py"], tree)
    with pytest.raises(
        DdpimgError,
        match=r"train --script ignored.py: exp/ignored.py is not in the "
        r"tree to stage \(what git tracks or would add, from ",
    ):
        check_command(["train", "--script", "ignored.py"], tree)
    with pytest.raises(DdpimgError, match="no command after --"):
        check_command([], tree)
