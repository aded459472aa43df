"""What a trainer gets from the runtime once the process group is up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from ddpimg.runtime.cpus import CpuShare


@dataclass(frozen=True)
class DistContext:
    """The initialised distributed world of this process.

    Built by ``ddpimg.runtime`` after the launch plan was applied, the device bound and
    ``torch.distributed.init_process_group`` returned. ``run_info`` is the JSON-ready description
    of the resolved topology, site profile and plan that ``manifest.json`` records.

    ``cpu_share``: the CPUs this rank may use and where that came from (``ddpimg.runtime.cpus``),
    decided once from the launch (the topology's ``rank_is_task``, the environment, the
    affinity mask); a layer that starts worker processes sizes them from it.
    ``cpu_threads_from_share``: the runtime set torch's intra-op threads to that share (a rank
    on the CPU, OMP_NUM_THREADS unset), so such a layer gives its workers' CPUs back from them.
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    device: torch.device
    backend: str
    timeout_s: float
    cpu_share: CpuShare
    cpu_threads_from_share: bool
    run_info: dict[str, Any] = field(default_factory=dict)

    @property
    def is_main(self) -> bool:
        return self.rank == 0
