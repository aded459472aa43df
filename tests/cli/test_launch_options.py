"""The options every command shares: --nproc-per-node's count, checked before any worker
starts."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from ddpimg.cli.launch_options import local_workers
from ddpimg.errors import LauncherError


@pytest.mark.parametrize(("given", "workers"), [(None, 0), (1, 1), (4, 4)])
def test_local_workers(given: int | None, workers: int) -> None:
    assert local_workers(argparse.Namespace(nproc_per_node=given)) == workers


@pytest.mark.parametrize("given", [0, -2])
def test_fewer_than_one_local_worker_is_an_error(given: int) -> None:
    with pytest.raises(LauncherError, match=rf"^--nproc-per-node {given}: the number of local"):
        local_workers(argparse.Namespace(nproc_per_node=given))


@pytest.mark.parametrize("command", ["train", "doctor"])
@pytest.mark.parametrize("nproc", ["0", "-2"])
def test_commands_exit_2_naming_the_count(command: str, nproc: str) -> None:
    argv = [sys.executable, "-m", "ddpimg", command, "--nproc-per-node", nproc, "--site", "local"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(
        f"ddpimg: error: --nproc-per-node {nproc}: the number of local workers must be at least 1"
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["train", "doctor"])
@pytest.mark.parametrize("timeout", ["0", "-5", "nan", "inf", "ten"])
def test_a_timeout_that_is_not_a_positive_number_exits_2(command: str, timeout: str) -> None:
    argv = [sys.executable, "-m", "ddpimg", command, "--timeout", timeout, "--site", "local"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert f"argument --timeout: must be a number of seconds above 0, got '{timeout}'" in (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr


def test_train_names_itself_and_lists_no_empty_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ddpimg.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser("train", command_prog="train").parse_args(["train", "--help"])
    usage = capsys.readouterr().out
    assert usage.startswith("usage: train ")
    assert "--backend {nccl,gloo}" in usage
