"""What a trainer gets from the runtime once the process group is up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DistContext:
    """The initialised distributed world of this process.

    Built by ``ddpimg.runtime`` after the launch plan was applied, the device bound and
    ``torch.distributed.init_process_group`` returned. ``run_info`` is the JSON-ready description
    of the resolved topology, site profile and plan that ``manifest.json`` records.
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
    run_info: dict[str, Any] = field(default_factory=dict)

    @property
    def is_main(self) -> bool:
        return self.rank == 0
