"""``--strategy none``: the plain module, no gradient sharing; one rank only.

What DDP costs on one rank (its bucketing, hooks and the broadcast at wrap time) is only
measurable against a run without it, and a bare module is also the easiest thing to debug
a model with. The state is saved exactly as ``--strategy ddp`` saves it (rank 0's
``model.pt``), so a run can be resumed under either strategy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError
from ddpimg.train.strategies.ddp import DdpStrategy

if TYPE_CHECKING:
    import torch
    from torch import nn

    from ddpimg.runtime.context import DistContext


class NoStrategy(DdpStrategy):
    name = "none"

    def __init__(self, ctx: DistContext) -> None:
        if ctx.world_size != 1:
            raise DdpimgError(
                f"--strategy none trains one process alone, but this run has "
                f"{ctx.world_size} ranks (from {ctx.run_info.get('source', 'the launcher')})",
                hint="use --strategy ddp (or deepspeed, fsdp) for several ranks, or start one "
                "process",
            )
        super().__init__(ctx)

    def wrap(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        self._model, self._optimizer = model, optimizer
        return model
