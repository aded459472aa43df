from __future__ import annotations

import pytest

from ddpimg.runtime.cpus import MAX_WORKERS, CpuShare, cpu_share


@pytest.mark.parametrize(
    ("env", "affinity", "local", "slurm_tasks", "expected"),
    [
        # srun -n 4 --cpus-per-task 8: every rank is a task with its 8 CPUs.
        ({"SLURM_CPUS_PER_TASK": "8"}, 8, 4, True, (8, "SLURM_CPUS_PER_TASK=8")),
        # One task of 32 CPUs starting 4 local ranks (train --nproc-per-node 4 under srun).
        (
            {"SLURM_CPUS_PER_TASK": "32"},
            32,
            4,
            False,
            (8, "SLURM_CPUS_PER_TASK=32 shared by 4 local ranks"),
        ),
        # mpirun --bind-to core: a mask of 2 of the machine's 64 CPUs is the rank's own.
        ({}, 2, 4, False, (2, "this process's CPU affinity mask (2 CPUs)")),
        # torchrun on a whole 64-CPU node with 8 local ranks.
        ({}, 64, 8, False, (8, "64 CPUs of the machine shared by 8 local ranks")),
        # More ranks than CPUs: still one CPU each.
        ({}, 64, 128, False, (1, "64 CPUs of the machine shared by 128 local ranks")),
        (
            {"SLURM_CPUS_PER_TASK": ""},
            64,
            1,
            True,
            (64, "64 CPUs of the machine shared by 1 local ranks"),
        ),
    ],
)
def test_cpus_per_rank(
    env: dict[str, str], affinity: int, local: int, slurm_tasks: bool, expected: tuple[int, str]
) -> None:
    share = cpu_share(
        env,
        affinity=affinity,
        machine=64,
        local_world_size=local,
        rank_is_task=slurm_tasks,
    )
    assert share == CpuShare(*expected)


@pytest.mark.parametrize(("cpus", "workers"), [(1, 0), (2, 1), (9, 8), (200, MAX_WORKERS)])
def test_workers_leave_one_cpu_to_training(cpus: int, workers: int) -> None:
    assert CpuShare(cpus, "").workers == workers
