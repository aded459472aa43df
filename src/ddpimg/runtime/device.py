"""Which device this rank uses, and which backend goes with it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ddpimg.errors import LauncherError

if TYPE_CHECKING:
    import torch


def choose_cuda_index(visible: int, local_rank: int, local_world_size: int) -> int | None:
    """The CUDA index for this rank: None for the CPU. Pure, so every case is testable.

    One visible GPU -> 0 (the launcher already gave each task its own, e.g. srun
    ``--gpus-per-task`` or Apptainer with CUDA_VISIBLE_DEVICES per task); as many visible
    as tasks on the node -> the local rank; anything else is a layout error.
    """
    if visible == 0:
        return None
    if visible == 1:
        return 0
    if visible == local_world_size:
        return local_rank
    raise LauncherError(
        f"{visible} GPUs are visible to this task (CUDA_VISIBLE_DEVICES="
        f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}) but the node runs "
        f"{local_world_size} tasks (LOCAL_WORLD_SIZE={local_world_size})",
        hint="tasks per node must equal GPUs per node: e.g. srun --ntasks-per-node=G "
        "--gpus-per-node=G, or one task per node with train --nproc-per-node G",
    )


def bind_device(local_rank: int, local_world_size: int) -> torch.device:
    """Select and make current this rank's device."""
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = choose_cuda_index(visible, local_rank, local_world_size)
    if index is None:
        return torch.device("cpu")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def default_backend(device: torch.device, requested: str = "") -> str:
    """nccl on CUDA, gloo on the CPU, unless ``--backend`` or the profile asks otherwise."""
    if requested:
        return requested
    return "nccl" if device.type == "cuda" else "gloo"
