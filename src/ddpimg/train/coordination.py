"""Work that one rank does for all: rank 0 does it while the others wait, and an error
there is raised on every rank, so that every rank exits with the same message instead of
the others timing out in their next collective."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch.distributed as dist

from ddpimg.errors import DdpimgError

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext


def prepare_on_main(ctx: DistContext, work: Callable[[], object]) -> None:
    """Run ``work`` on rank 0 (collective: every rank calls this). A DdpimgError raised by
    it is raised again, of the same class, on every rank."""
    outcome: list[tuple[type[DdpimgError], str, str | None] | None] = [None]
    if ctx.is_main:
        try:
            work()
        except DdpimgError as err:
            outcome = [(type(err), err.message, err.hint)]
    if ctx.world_size > 1:
        device = ctx.device if ctx.device.type == "cuda" else None
        dist.broadcast_object_list(outcome, src=0, device=device)
    failure = outcome[0]
    if failure is not None:
        kind, message, hint = failure
        raise kind(message, hint=hint)
