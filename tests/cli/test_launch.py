"""The start-up every command that runs ranks shares: what its local workers run."""

from __future__ import annotations

import pytest

from ddpimg.cli import build_parser
from ddpimg.cli.launch import prepare_launch, strip_nproc
from ddpimg.runtime.defaults import DEFAULT_TIMEOUT_S
from ddpimg.runtime.reexec import REEXEC_MARK


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["train", "--nproc-per-node", "2", "--epochs", "1"], ["train", "--epochs", "1"]),
        (["train", "--nproc-per-node=4"], ["train"]),
        (
            ["train", "--script", "x.py", "--nproc-per-node", "2"],
            ["train", "--script", "x.py", "--nproc-per-node", "2"],
        ),
        (["train", "mnist"], ["train", "mnist"]),
    ],
)
def test_workers_get_the_command_line_without_nproc(argv: list[str], expected: list[str]) -> None:
    assert strip_nproc(argv) == expected


def test_the_start_up_gives_the_plan_and_the_workers_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As in the re-executed process: the plan is made, nothing is exec'd.
    monkeypatch.setenv(REEXEC_MARK, "1")
    argv = ["doctor", "--nproc-per-node", "2", "--site", "local", "--json"]
    launch = prepare_launch(build_parser("doctor").parse_args(argv), argv)
    assert launch.plan.site.name == "local"
    assert launch.local_workers == 2
    assert launch.worker_program == ("-m", "ddpimg", "doctor", "--site", "local", "--json")
    assert launch.timeout_s == DEFAULT_TIMEOUT_S
