"""What srun returns when one task of a step is killed by SIGKILL (the out-of-memory killer,
a rank's sentinel): measured on the real Slurm of the test cluster, so that the exit status
table of docs/checkpoints-and-failures.md and the requeue logic of the job scripts rest on
a fact, not on a guess."""

from __future__ import annotations

import pytest

from tests.integration.runs import run

# Task 1 kills itself with SIGKILL; task 0 ends normally a moment later.
TASKS = 'if [ "$SLURM_PROCID" = 1 ]; then kill -KILL $$; fi; sleep 2'


@pytest.mark.slurm
def test_srun_returns_137_when_one_task_is_sigkilled(slurm_env: dict[str, str]) -> None:
    proc = run(["srun", "-n", "2", "sh", "-c", TASKS], slurm_env, timeout=120, check=False)
    assert proc.returncode == 137, proc.stderr
    assert "Killed" in proc.stderr or "signal 9" in proc.stderr, proc.stderr
