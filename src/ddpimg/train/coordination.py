"""Work that one rank does for all: rank 0 does it while the others wait, and an error
there is raised on every rank, so that every rank exits with the same message instead of
the others timing out in their next collective (or waiting for a decision that never
comes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import torch.distributed as dist

from ddpimg.errors import DdpimgError, report

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext

Value = TypeVar("Value")
# What the other ranks are told of rank 0's unexpected error: its first line or so (rank 0
# prints the whole traceback).
MAX_CRASH_TEXT = 500


def decided_on_main(ctx: DistContext, decide: Callable[[], Value]) -> Value:
    """What ``decide`` returns on rank 0, on every rank (collective: every rank calls this;
    the value must pickle). A DdpimgError raised by it is raised again, of the same class
    and with the same message, on every rank, each printing it first (``errors.report``):
    its launcher may end a rank once another has exited. Any other exception is raised as
    itself on rank 0 and as a RuntimeError naming it on the others."""
    outcome: list[object] = [None]
    failure: DdpimgError | None = None
    crash: Exception | None = None
    if ctx.is_main:
        try:
            outcome = [("ok", decide())]
        except DdpimgError as err:
            failure = err
            outcome = [("error", type(err), err.message, err.hint)]
        except Exception as err:  # told to the other ranks, then raised here
            crash = err
            outcome = [("crash", f"{type(err).__name__}: {err}"[:MAX_CRASH_TEXT])]
    if ctx.world_size > 1:
        device = ctx.device if ctx.device.type == "cuda" else None
        dist.broadcast_object_list(outcome, src=0, device=device)
    decision = outcome[0]
    if not isinstance(decision, tuple):
        raise RuntimeError(f"rank 0 broadcast {decision!r} instead of its decision")
    if decision[0] == "error":
        _, kind, message, hint = decision
        failure = failure or kind(message, hint=hint)
        report(failure)
        raise failure
    if decision[0] == "crash":
        if crash is not None:
            raise crash
        raise RuntimeError(f"rank 0 failed while deciding for every rank: {decision[1]}")
    value: Value = decision[1]
    return value


def prepare_on_main(ctx: DistContext, work: Callable[[], object]) -> None:
    """Run ``work`` on rank 0 (collective: every rank calls this). A DdpimgError raised by
    it is raised again, of the same class, on every rank."""

    def done() -> None:
        work()  # what it returns stays on rank 0

    decided_on_main(ctx, done)
