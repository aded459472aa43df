"""A user's PyTorch Lightning script (``Trainer(strategy="ddp", devices=N, num_nodes=M)``)
under ``train --script`` with ``--nproc-per-node``, mpirun and srun, one after the other in
one directory without ``--out``: three runs, each in a directory of its own and completed,
every rank trained, and Lightning detects each launcher's cluster environment. (The same
script's global ranks and world size under each launcher: tests/integration/test_scripts.py,
whose Lightning cell checks them.) Preemption: ddpimg's callback saves Lightning's checkpoint,
the job script requeues the job once, and the requeued job continues its own run directory.
"""

from __future__ import annotations

import json
import os
import re
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


# The cluster environment Lightning detects under each launcher.
ENVIRONMENTS = {"nproc": "TorchElasticEnvironment", "mpirun": "MPIEnvironment",
                "srun": "SLURMEnvironment"}  # fmt: skip


@pytest.mark.torchrun
@pytest.mark.mpi
@pytest.mark.slurm
def test_three_launchers_in_one_directory_give_three_completed_runs(
    tmp_path: Path, slurm_env: dict[str, str]
) -> None:
    """The same command under ``train --nproc-per-node 2``, ``mpirun -np 2`` and ``srun -n 2``
    in one directory, without --out: each run gets a directory of its own under ./runs (the
    srun job's named by its job id) and completes; no run refuses or re-enters another's."""
    output = tmp_path / "output"
    output.mkdir()
    script = ["--script", *lightning(output)[2:]]
    launchers = {
        "nproc": [command("train"), "--nproc-per-node", "2"],
        "mpirun": ["mpirun", "-np", "2", command("train")],
        "srun": ["srun", "-n", "2", command("train")],
    }
    said = {}
    for name, prefix in launchers.items():
        proc = run([*prefix, *script], slurm_env, cwd=tmp_path)
        said[name] = next(line for line in proc.stderr.splitlines() if line.startswith("ddpimg:"))
        found = reports(output, 2)
        assert {r["environment"] for r in found} == {ENVIRONMENTS[name]}
    runs = tmp_path / "runs"
    made = sorted(path for path in runs.iterdir() if path.name != "latest")
    assert len(made) == 3
    records = [json.loads((path / "manifest.json").read_text()) for path in made]
    assert [(r["status"], r["exit_status"]) for r in records] == [("completed", 0)] * 3
    assert {r["script"]["path"] for r in records} == {str(SCRIPT)}
    by_job = [path for path in made if re.fullmatch(r"lightning_ddp-\d+", path.name)]
    assert len(by_job) == 1, made  # srun's; the others by their start times
    assert (
        said["srun"]
        == f"ddpimg: new run directory runs/{by_job[0].name} (runs/latest points to it)"
    )
    assert os.readlink(runs / "latest") == by_job[0].name
    for path in made:
        assert any(r["kind"] == "summary" for r in map(json.loads, (path / "metrics.jsonl").open()))


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
    # No --out: the run's record goes to runs/lightning_ddp-JOBID, which the requeued job
    # continues (its own, by its job id).
    command_line = ["train", *script, "--requeue-signal", "USR2"]
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
    record = tmp_path / "runs" / f"lightning_ddp-{job_id}"
    assert sorted(path.name for path in (tmp_path / "runs").iterdir()) == ["latest", record.name]
    assert f"ddpimg: new run directory runs/{record.name}" in text
    assert (
        f"ddpimg: continuing runs/{record.name}, job {job_id}'s run of these options (preempted"
        in text
    )
    manifest = json.loads((record / "manifest.json").read_text())
    assert (manifest["status"], manifest["continues"]["status"]) == ("completed", "preempted")
    assert manifest["resumed_from"]["path"] == str(out / "hpc_ckpt_1.ckpt")
