from __future__ import annotations

import pytest

from ddpimg.cli.local_workers import strip_nproc


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
