"""The --nproc-per-node launcher: which of torch's agent lines it keeps."""

from __future__ import annotations

import logging

import pytest

from ddpimg.runtime.local_workers import _ExplainedExits, launcher_status


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


@pytest.mark.parametrize(
    ("codes", "status"),
    [
        ([1, 1], 1),  # the same bug on every worker
        ([5, 1], 1),  # rank 0 named rank 1's failure; rank 1's own error decides
        ([75, 1], 1),  # stopped by the agent's SIGTERM (a preemption signal) after rank 1 failed
        ([2, 5], 2),
        ([5, 5], 5),  # a rank lost, named by the others
        ([75, 75], 75),
        ([130, 75], 75),
        ([-9, -15], 1),  # killed by signals alone
    ],
)
def test_the_launcher_reports_a_workers_own_failure_first(codes: list[int], status: int) -> None:
    """Issue 47: the first failing worker's status once made a script's bug read as a lost
    rank (5), which a batch script requeues."""
    assert launcher_status(codes) == status
