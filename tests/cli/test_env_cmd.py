"""`ddpimg env` as a user runs it: a subprocess with a real environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ddpimg.cli import build_parser, env_cmd

BASE = {
    k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "DDPIMG_"))
}


def ddpimg(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddpimg", *args],
        env=BASE | (env or {}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_env_json_under_a_simulated_srun_step() -> None:
    step = {
        "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "3", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1", "SLURM_STEP_NUM_TASKS": "8", "SLURM_STEP_NUM_NODES": "2",
        "SLURM_STEP_NODELIST": "della-l[01-02]", "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
    }  # fmt: skip
    proc = ddpimg("env", "--json", "--site", "della", env=step)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["source"], data["rank"], data["world_size"], data["node_rank"]) == (
        "slurm",
        5,
        8,
        1,
    )
    assert data["master_addr"] == "della-l01"
    assert data["site"] == "della"


def test_env_never_imports_torch() -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ddpimg", "env", "--json"],
        env=BASE, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()]
    assert "ddpimg.plan" in imported  # the check below would be empty if importtime changed
    assert not [
        name for name in imported if name.split(".")[0] in {"torch", "numpy", "deepspeed", "mpi4py"}
    ]


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({"SLURM_JOB_ID": "1", "SLURM_NTASKS": "2", "SLURM_PROCID": "0"}, [], "srun"),
        ({}, ["--site", "atlantis"], "atlantis"),
        ({"SLURM_JOB_ID": "1", "SLURM_STEP_ID": "0", "SLURM_PROCID": "x"}, [], "SLURM_PROCID"),
    ],
)
def test_errors_exit_2_with_one_ddpimg_error_message(
    env: dict[str, str], args: list[str], message: str
) -> None:
    proc = ddpimg("env", "--json", *args, env=env)
    assert proc.returncode == 2
    assert proc.stderr.startswith("ddpimg: error:")
    assert message in proc.stderr
    assert proc.stdout == ""


def test_explain_says_how_master_was_chosen() -> None:
    proc = ddpimg("env", "--explain", "--site", "local")
    assert proc.returncode == 0, proc.stderr
    assert "MASTER_ADDR=127.0.0.1" in proc.stdout


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--json"],
        ["--json", "--json", "--explain"],
        ["--site", "puhti", "--json"],
        ["--site=puhti", "--site", "della"],
        ["--site=a=b"],
        ["--site", "./mine.toml", "--keep-env", "FOO_*", "--keep-env=BAR"],
    ],
)
def test_plain_arguments_parse_as_argparse_parses_them(argv: list[str]) -> None:
    plain = env_cmd.parse_plain(argv)
    assert plain is not None
    assert vars(plain) == vars(build_parser("env").parse_args(["env", *argv]))


@pytest.mark.parametrize(
    "argv",
    [
        ["-h"],
        ["--help"],
        ["--js"],  # an abbreviation: argparse refuses it (allow_abbrev=False)
        ["--json=1"],
        ["--bogus"],
        ["extra"],
        ["--", "--json"],
        ["--site"],
        ["--site", "--json"],
        ["--site", ""],
        ["--site="],
        ["--site=-x"],
        ["--keep-env", "-x"],
        ["--local-rank=0"],
    ],
)
def test_other_arguments_are_left_to_argparse(argv: list[str]) -> None:
    assert env_cmd.parse_plain(argv) is None


@pytest.mark.parametrize(
    "spelling", [["--local-rank", "1"], ["--local-rank=1"], ["--local_rank=1"]]
)
def test_local_rank_as_the_old_launchers_pass_it(spelling: list[str]) -> None:
    env = {"LOCAL_RANK": "1", "RANK": "1", "WORLD_SIZE": "2"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29732"}
    proc = ddpimg("env", "--json", *spelling, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["local_rank"] == 1


def test_a_local_rank_that_disagrees_is_an_error_naming_both() -> None:
    proc = ddpimg("env", "--local_rank=0", env={"LOCAL_RANK": "1"})
    assert proc.returncode == 2
    assert proc.stderr.startswith("ddpimg: error: --local-rank=0 disagrees with LOCAL_RANK=1\n")
