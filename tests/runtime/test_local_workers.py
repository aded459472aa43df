"""The --nproc-per-node launcher: the agent's own verdict line gives way to ddpimg's."""

from __future__ import annotations

import logging

import pytest

from ddpimg.runtime.local_workers import _AgentVerdicts


def _record(message: str, args: tuple[object, ...]) -> logging.LogRecord:
    return logging.LogRecord(
        "torch.distributed.elastic.multiprocessing.api", logging.ERROR, "api.py", 1002,
        message, args, None,
    )  # fmt: skip


@pytest.mark.parametrize("code", [75, 2, 130, 1, -9])
def test_the_agents_failed_line_never_shows(code: int) -> None:
    """ddpimg's verdict (endings.workers) is the launcher's last word for every exit: the
    agent's "failed (exitcode: -9) local_rank: 1" was the last line users saw."""
    failed = _record("failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s",
                     (code, 1, 42, "python"))  # fmt: skip
    assert _AgentVerdicts().filter(failed) is False


def test_the_agents_other_lines_stay() -> None:
    closing = _record("Sending process %s closing signal %s", (42, "SIGTERM"))
    assert _AgentVerdicts().filter(closing) is True
