from __future__ import annotations

import pytest

from ddpimg.errors import LauncherError
from ddpimg.runtime.cpus import cpu_share
from ddpimg.runtime.device import choose_cuda_index, cpu_threads


@pytest.mark.parametrize(
    ("visible", "local_rank", "local_world_size", "expected"),
    [
        (0, 0, 1, None),
        (0, 3, 4, None),
        (1, 3, 4, 0),  # srun --gpus-per-task: each task sees its own GPU as cuda:0
        (4, 3, 4, 3),
        (2, 1, 2, 1),
    ],
)
def test_device_choice(
    visible: int, local_rank: int, local_world_size: int, expected: int | None
) -> None:
    assert choose_cuda_index(visible, local_rank, local_world_size) == expected


@pytest.mark.parametrize(("visible", "local_world_size"), [(4, 2), (2, 4), (4, 1)])
def test_tasks_per_node_must_equal_gpus_per_node(visible: int, local_world_size: int) -> None:
    with pytest.raises(
        LauncherError, match=rf"{visible} GPUs are visible .* runs {local_world_size} tasks"
    ) as err:
        choose_cuda_index(visible, 0, local_world_size)
    assert "tasks per node must equal GPUs per node" in str(err.value)


@pytest.mark.parametrize(
    ("visible", "local_rank", "local_world_size", "devices_per_rank", "expected"),
    [
        (0, 1, 2, 2, None),
        (4, 0, 2, 2, 0),
        (4, 1, 2, 2, 2),  # toy: replica 1 drives cuda:2 and cuda:3
        (2, 0, 1, 2, 0),
        (2, 1, 2, 2, 0),  # srun --gpus-per-task=2: each task sees its own two
        (8, 3, 4, 2, 6),
    ],
)
def test_device_choice_for_several_gpus_per_rank(
    visible: int, local_rank: int, local_world_size: int, devices_per_rank: int, expected: int
) -> None:
    assert choose_cuda_index(visible, local_rank, local_world_size, devices_per_rank) == expected


@pytest.mark.parametrize(("visible", "local_world_size"), [(4, 4), (1, 1), (3, 1), (6, 2)])
def test_gpus_per_node_must_be_tasks_times_gpus_per_replica(
    visible: int, local_world_size: int
) -> None:
    with pytest.raises(
        LauncherError,
        match=rf"{visible} GPUs are visible .* runs {local_world_size} tasks .* of 2 GPUs each "
        r"\(--gpus-per-replica 2\)\n  hint: GPUs per node must equal tasks per node x GPUs per "
        r"replica",
    ):
        choose_cuda_index(visible, 0, local_world_size, devices_per_rank=2)


@pytest.mark.parametrize(
    ("affinity", "node_cpus", "local_world_size", "env", "expected"),
    [
        (2, 2, 1, {}, 2),  # one process owns the node
        (2, 2, 2, {}, 1),  # two local workers share it: one thread each, not two
        (64, 64, 8, {}, 8),
        (6, 64, 3, {}, 6),  # srun --cpus-per-task=6: the 6 bound CPUs are all its own
        (1, 2, 2, {}, 1),  # mpirun --bind-to core
        (2, 2, 4, {}, 1),  # more ranks than CPUs: at least one
        (2, 2, 2, {"OMP_NUM_THREADS": "2"}, None),  # the user's choice stands
        (2, 2, 2, {"OMP_NUM_THREADS": ""}, 1),
        # torchrun-style workers inside one Slurm task of 8 CPUs on a 64-CPU node.
        (8, 64, 4, {"SLURM_CPUS_PER_TASK": "8"}, 2),
    ],
)
def test_cpu_threads(
    affinity: int, node_cpus: int, local_world_size: int, env: dict[str, str], expected: int | None
) -> None:
    share = cpu_share(
        env,
        affinity=affinity,
        machine=node_cpus,
        local_world_size=local_world_size,
        rank_is_task=False,
    )
    assert cpu_threads(share, env) == expected
