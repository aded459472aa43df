"""Which device this rank uses, and which backend goes with it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ddpimg.errors import LauncherError
from ddpimg.runtime.cpus import CpuShare, cpu_share

if TYPE_CHECKING:
    import torch


def choose_cuda_index(
    visible: int, local_rank: int, local_world_size: int, devices_per_rank: int = 1
) -> int | None:
    """The CUDA index of this rank's first device (it drives ``devices_per_rank`` consecutive
    ones, e.g. the toy trainer's head and tail): None for the CPU. Pure, so every case is
    testable.

    As many visible as tasks on the node need -> the local rank's block; as many visible as
    one task needs -> 0 (the launcher already gave each task its own, e.g. srun
    ``--gpus-per-task`` or Apptainer with CUDA_VISIBLE_DEVICES per task); anything else is
    a layout error.
    """
    if visible == 0:
        return None
    if visible == local_world_size * devices_per_rank:
        return local_rank * devices_per_rank
    if visible == devices_per_rank:
        return 0
    found = (
        f"{visible} GPUs are visible to this task (CUDA_VISIBLE_DEVICES="
        f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}) but the node runs "
        f"{local_world_size} tasks (LOCAL_WORLD_SIZE={local_world_size})"
    )
    if devices_per_rank == 1:
        raise LauncherError(
            found,
            hint="tasks per node must equal GPUs per node: e.g. srun --ntasks-per-node=G "
            "--gpus-per-node=G, or one task per node with train --nproc-per-node G",
        )
    raise LauncherError(
        f"{found} of {devices_per_rank} GPUs each (--gpus-per-replica {devices_per_rank})",
        hint=f"GPUs per node must equal tasks per node x GPUs per replica: e.g. "
        f"{visible // devices_per_rank or 1} task(s) per node with --gpus-per-replica "
        f"{devices_per_rank}, or --gpus-per-replica 1 with {visible} tasks per node",
    )


def bind_device(local_rank: int, local_world_size: int, devices_per_rank: int = 1) -> torch.device:
    """Select and make current this rank's (first) device."""
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = choose_cuda_index(visible, local_rank, local_world_size, devices_per_rank)
    if index is None:
        return torch.device("cpu")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def default_backend(device: torch.device, requested: str = "") -> str:
    """nccl on CUDA, gloo on the CPU, unless ``--backend`` or the profile asks otherwise."""
    if requested:
        return requested
    return "nccl" if device.type == "cuda" else "gloo"


def rank_cpu_share(local_world_size: int, rank_is_task: bool) -> CpuShare:
    """This process's CPU share (``ddpimg.runtime.cpus``), from its environment and its CPU
    affinity mask; ``rank_is_task``: the topology's capability of that name."""
    affinity = len(os.sched_getaffinity(0))
    return cpu_share(
        os.environ,
        affinity=affinity,
        machine=os.cpu_count() or affinity,
        local_world_size=local_world_size,
        rank_is_task=rank_is_task,
    )


def cpu_threads(share: CpuShare, env: Mapping[str, str]) -> int | None:
    """Intra-op threads for a rank computing on the CPU; None: leave torch's choice.

    torch starts one thread per CPU of the machine in every process, so N ranks on one node
    run N times as many threads as there are cores and slow each other down (torchrun sets
    OMP_NUM_THREADS=1 for that reason). A rank gets one thread per CPU of its ``share`` (its
    Slurm task's CPUs, the CPUs a binding launcher gave it, or its part of the node).
    OMP_NUM_THREADS, when set, is the user's choice.
    """
    if env.get("OMP_NUM_THREADS"):
        return None
    return share.cpus


def bind_cpu_threads(threads: int | None) -> int:
    """Give torch ``threads`` intra-op threads (None: leave them as they are); the number of
    intra-op threads torch uses."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()
