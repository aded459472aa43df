"""The test harness itself: the private Slurm cluster and Open MPI run real multi-task steps."""

from __future__ import annotations

import sys

import pytest

from tests.engines.slurm import LocalSlurm
from tests.integration.runs import run

# One write per rank: with PYTHONUNBUFFERED, print() writes each piece separately and
# mpirun interleaves the ranks' pieces.
MPI_RANK = (
    "import sys; from mpi4py import MPI; c = MPI.COMM_WORLD; "
    "sys.stdout.write(f'{c.Get_rank()} {c.Get_size()}\\n')"
)


def _sorted_lines(text: str) -> list[str]:
    return sorted(line.strip() for line in text.splitlines() if line.strip())


@pytest.mark.slurm
@pytest.mark.parametrize("ntasks", [2, 4])
def test_srun_gives_each_task_its_procid(slurm_env: dict[str, str], ntasks: int) -> None:
    proc = run(["srun", "-n", str(ntasks), "printenv", "SLURM_PROCID"], slurm_env, timeout=60)
    assert _sorted_lines(proc.stdout) == [str(rank) for rank in range(ntasks)]


@pytest.mark.slurm
def test_srun_step_sets_step_variables(slurm_env: dict[str, str]) -> None:
    cmd = ["srun", "-n", "2", "sh", "-c", "echo $SLURM_STEP_ID $SLURM_STEP_NUM_TASKS"]
    proc = run(cmd, slurm_env, timeout=60)
    assert _sorted_lines(proc.stdout) == ["0 2", "0 2"]


@pytest.mark.slurm
def test_cluster_reports_its_mpi_plugins(slurm_cluster: LocalSlurm) -> None:
    assert "none" in slurm_cluster.mpi_plugins


@pytest.mark.mpi
@pytest.mark.parametrize("nproc", [2, 4])
def test_mpirun_gives_each_rank_its_place(run_env: dict[str, str], nproc: int) -> None:
    proc = run(["mpirun", "-np", str(nproc), sys.executable, "-c", MPI_RANK], run_env, timeout=120)
    assert _sorted_lines(proc.stdout) == [f"{rank} {nproc}" for rank in range(nproc)]
