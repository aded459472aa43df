"""A decision rank 0 makes for every rank before any process group exists (a user's script
makes its own later): rank 0 writes it into the rendezvous store, sealed with the job's key
(``store_auth``), and the others read it there.

An error rank 0 decides (``--out`` holds another run, the runs root cannot be written) is
written the same way, and every rank prints it (first: mpirun and torch's agent end the
other ranks once one has exited) and raises it again: the same message, the same class,
hence the same exit status. Rank 0 hosts the store, so it stays until every other rank has
read the error (each adds one to a counter once it has printed it), bounded by
``--timeout``: a rank that found the store gone would print torch's C++ frames
(``c10::DistNetworkError``, ``frame #0 ...``) and a traceback instead of the one error.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from ddpimg import errors
from ddpimg.errors import DdpimgError, RendezvousError, report
from ddpimg.runtime.interruptible import heeding
from ddpimg.runtime.rendezvous import POLL_S, Stop, no_signal, stopped_start
from ddpimg.runtime.store_auth import RecordSeal

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

READ_SUFFIX = "/read"
_POLL_S = 0.05
# What the other ranks are told of rank 0's unexpected error (rank 0 prints its traceback).
_MAX_CRASH_TEXT = 500
# The classes an error may be raised as again on the other ranks: every one maps to its exit
# status (``exitcodes.for_error``); anything else arrives as a DdpimgError.
_KINDS: dict[str, type[DdpimgError]] = {
    kind.__name__: kind
    for kind in (
        errors.DdpimgError,
        errors.LauncherError,
        errors.ProfileError,
        errors.DataError,
        errors.RendezvousError,
        errors.JobError,
    )
}


def decided_by_rank0(
    store: Store,
    name: str,
    key: bytes,
    *,
    rank: int,
    world_size: int,
    timeout_s: float,
    decide: Callable[[], str],
    stop: Stop = no_signal,
) -> str:
    """What ``decide`` returns on rank 0 (text), on every rank, through the store under
    ``name``. Collective. A DdpimgError in ``decide`` is raised on every rank; rank 0 raises
    it once the others have read it (or ``timeout_s`` has passed). Any other exception is
    raised as itself on rank 0 and as a RuntimeError naming it on the others, which end
    instead of waiting for a decision that never comes. A preemption signal (``stop``)
    ends the other ranks' wait (``StartStopped``)."""
    seal = RecordSeal(key)
    if rank == 0:
        try:
            value = decide()
        except DdpimgError as err:
            report(err)  # first: once another rank has exited, a launcher may end this one
            failure = {"error": type(err).__name__, "message": err.message, "hint": err.hint}
            store.set(name, seal.seal(name, json.dumps(failure)))
            _wait_for_readers(store, name, world_size - 1, timeout_s)
            raise
        except Exception as err:  # told to the others, then raised here with its traceback
            crash = {"crash": f"{type(err).__name__}: {err}"[:_MAX_CRASH_TEXT]}
            store.set(name, seal.seal(name, json.dumps(crash)))
            _wait_for_readers(store, name, world_size - 1, timeout_s)
            raise
        store.set(name, seal.seal(name, json.dumps({"value": value})))
        return value
    heeding(
        lambda: store.wait([name], timedelta(seconds=timeout_s)),
        lambda: stopped_start(stop, rank, "rank 0 decided where the run goes"),
        POLL_S,
    )
    text = seal.open(name, store.get(name))
    if text is None:
        raise RendezvousError(
            f"rank {rank}: rank 0's decision {name} does not carry the job's key: another "
            "process wrote it",
            hint="someone else reaches the rendezvous port: see docs/security.md",
        )
    outcome = json.loads(text)  # sealed with the job's key: rank 0 wrote it
    if "crash" in outcome:
        store.add(name + READ_SUFFIX, 1)
        raise RuntimeError(f"rank 0 failed while deciding {name}: {outcome['crash']}")
    if "error" in outcome:
        refused = _KINDS.get(outcome["error"], DdpimgError)(outcome["message"], outcome["hint"])
        report(refused)
        store.add(name + READ_SUFFIX, 1)
        raise refused
    shared: str = outcome["value"]
    return shared


def _wait_for_readers(store: Store, name: str, readers: int, timeout_s: float) -> None:
    """Until ``readers`` ranks have read ``name``, at most ``timeout_s``: a rank that never
    comes is named by nobody here (rank 0's own error is the one that matters)."""
    deadline = time.monotonic() + timeout_s
    while readers > 0 and time.monotonic() < deadline:
        try:
            if store.add(name + READ_SUFFIX, 0) >= readers:
                return
        except RuntimeError:  # torch's DistStoreError: the store is of no more use
            return
        time.sleep(_POLL_S)
