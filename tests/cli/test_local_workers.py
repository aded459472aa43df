from __future__ import annotations

import logging

import pytest

from ddpimg.cli.local_workers import _ExplainedExits, strip_nproc


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


@pytest.mark.parametrize(
    ("code", "shown"), [(75, False), (2, False), (130, False), (1, True), (-9, True)]
)
def test_the_agents_line_only_for_exits_the_worker_did_not_explain(code: int, shown: bool) -> None:
    record = logging.LogRecord(
        "torch.distributed.elastic.multiprocessing.api", logging.ERROR, "api.py", 1002,
        "failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s",
        (code, 0, 1, "python"), None,
    )  # fmt: skip
    assert _ExplainedExits().filter(record) is shown
