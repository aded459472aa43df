"""How many CPUs a rank may use, and from that how many data-loading worker processes it
starts by default. Pure: the caller passes the environment and what the OS says.

The rule, in order:

1. ``SLURM_CPUS_PER_TASK`` (``--cpus-per-task``): the CPUs of one Slurm task. When every
   rank is a Slurm task (ranks from ``srun``: the topology's ``rank_is_task``), a rank has
   them all; when the ranks were started inside one task (``train --nproc-per-node``,
   torchrun or DeepSpeed's launcher under ``srun``), the task's local ranks share them.
2. Otherwise the CPU affinity mask: a mask smaller than the machine was set for this
   process by a binding launcher (``mpirun --bind-to``, ``taskset``) and is the rank's own;
   a mask of the whole machine is shared by the node's local ranks.

A rank keeps one CPU for its training process and gives the rest to loader workers
(``MAX_WORKERS`` at most: beyond that a worker's memory costs more than its decoding gains).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MAX_WORKERS = 32


@dataclass(frozen=True)
class CpuShare:
    """``cpus`` a rank may use, and how that was found (for the manifest)."""

    cpus: int
    source: str

    @property
    def workers(self) -> int:
        """Data-loading workers by default: all CPUs but the training process's own."""
        return max(0, min(self.cpus - 1, MAX_WORKERS))


def cpu_share(
    env: Mapping[str, str],
    *,
    affinity: int,
    machine: int,
    local_world_size: int,
    rank_is_task: bool,
) -> CpuShare:
    """This rank's CPUs: ``affinity`` is the size of its CPU affinity mask, ``machine`` the
    machine's CPU count, ``rank_is_task`` whether each rank is its own Slurm task."""
    local = max(local_world_size, 1)
    per_task = env.get("SLURM_CPUS_PER_TASK", "")
    if per_task.isdigit() and int(per_task) > 0:
        if rank_is_task:
            return CpuShare(int(per_task), f"SLURM_CPUS_PER_TASK={per_task}")
        return CpuShare(
            max(int(per_task) // local, 1),
            f"SLURM_CPUS_PER_TASK={per_task} shared by {local} local ranks",
        )
    if affinity < machine:
        return CpuShare(max(affinity, 1), f"this process's CPU affinity mask ({affinity} CPUs)")
    return CpuShare(
        max(affinity // local, 1), f"{affinity} CPUs of the machine shared by {local} local ranks"
    )
