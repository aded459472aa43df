from __future__ import annotations

import pytest

from ddpimg.errors import LauncherError
from ddpimg.runtime.device import choose_cuda_index


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
