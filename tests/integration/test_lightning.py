"""A user's PyTorch Lightning script (``Trainer(strategy="ddp", devices=N, num_nodes=M)``)
under ``train --script`` with mpirun: every rank trains, and the global ranks and world size
Lightning reports are the launch's. (The same script under ``--nproc-per-node`` and srun:
tests/integration/test_scripts.py, whose Lightning cell checks the same reports.) Preemption:
ddpimg's callback saves Lightning's checkpoint and the job script requeues the job once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.runs import command, run
from tests.integration.test_sbatch import (
    job_info,
    release_requeued,
    submit,
    wait_for_end,
    wait_until,
)

SCRIPT = Path(__file__).parent / "scripts" / "lightning_ddp.py"

pytestmark = pytest.mark.lightning


def reports(out: Path, world_size: int) -> list[dict[str, Any]]:
    """Every rank's report; each trained the same steps and holds the same weights."""
    found = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(world_size)]
    assert [r["global_rank"] for r in found] == list(range(world_size))
    assert {r["world_size"] for r in found} == {world_size}
    assert len({r["steps"] for r in found}) == 1
    assert found[0]["steps"] > 0
    assert len({r["checksum"] for r in found}) == 1, "ranks ended with different weights"
    return found


def lightning(out: Path, devices: int = 2, nodes: int = 1) -> list[str]:
    return [command("train"), "--script", str(SCRIPT), str(out), str(devices), str(nodes)]


@pytest.mark.mpi
def test_mpirun(tmp_path: Path, run_env: dict[str, str]) -> None:
    run(["mpirun", "-np", "2", *lightning(tmp_path)], run_env)
    found = reports(tmp_path, 2)
    assert {r["environment"] for r in found} == {"MPIEnvironment"}


@pytest.mark.slurm
def test_a_preempted_lightning_job_is_requeued_once_by_ddpimg(
    tmp_path: Path, slurm_env: dict[str, str]
) -> None:
    # The batch script of `ddpimg sbatch` passes USR2 on to the step near the time limit.
    # The script even asks Lightning's SLURM auto-requeue to listen to USR2, as the old
    # recipe did; but ddpimg's handler is there first, Lightning leaves a handled signal
    # alone, and ddpimg's callback saves Lightning's hpc checkpoint and exits 75: the batch
    # script requeues (not Lightning's `scontrol requeue`, which is not in a container), and
    # the requeued run resumes from that checkpoint to the end.
    out = tmp_path / "run"
    out.mkdir()
    script = [*lightning(out)[1:], "--max-steps", "60", "--step-sleep", "0.2"]
    command_line = ["train", "--out", str(tmp_path / "record"), *script, "--requeue-signal", "USR2"]
    job_id = submit(["--", *command_line], slurm_env, tmp_path)
    log = tmp_path / f"ddpimg-{job_id}.out"
    wait_until(f"{out}/step-2 exists", (out / "step-2").exists, limit_s=120)
    run(["scancel", "--signal=USR2", "--batch", job_id], slurm_env, timeout=30)
    release_requeued(job_id, slurm_env, restarts=1)
    info = wait_for_end(job_id, slurm_env, log)
    text = log.read_text()
    assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "1"), text
    assert f"ddpimg: requeueing job {job_id} (restart 1 of 3)" in text
    assert f"Requeued SLURM job: {job_id}" not in text
    found = reports(out, 2)
    assert {r["restart"] for r in found} == {1}
    assert found[0]["steps"] == 60
    assert (out / "hpc_ckpt_1.ckpt").is_file()
    assert job_info(job_id, slurm_env)["Restarts"] == "1"
