"""The --nproc-per-node launcher: which of torch's agent lines it keeps."""

from __future__ import annotations

import logging

import pytest

from ddpimg.runtime.local_workers import _ExplainedExits


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
