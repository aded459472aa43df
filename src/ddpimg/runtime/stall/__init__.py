"""Failures in the middle of training, named: which rank stopped, where, since when.

Every rank of a training run with more than one process records its progress: the step,
the phase of the step it is in (data, forward, backward, optimizer, collective,
checkpoint, eval) and since when. The loop writes it into memory (one tuple assignment per
phase, about 0.3 us); a background thread publishes it every heartbeat (``--timeout`` / 20,
between 0.5 and 2 s) under ``ddpimg/progress/<rank>`` in the rendezvous store that the
ranks met through (rank 0's TCPStore, or torchrun's agent's): one small ``set`` a
heartbeat, no collective, nothing on the training thread. The other ranks read it only
when something failed. The store was chosen over files in the run directory (metadata
traffic on a shared file system every second from every rank, and caches that make
"how long ago" unreliable) and over a collective (it is what hangs).

When a collective fails under a rank (Gloo's timeout or a peer that closed its
connections; ``is_collective_failure``), the rank judges the records (``verdict``): who
failed (published its own error), went silent (no report for 3 heartbeats: stopped, dead,
node gone), never reported, or is stuck behind the others while still reporting. The first
rank to judge posts its verdict in the store and the others use it, so all of them name the
same ranks. Each surviving rank then raises ``RankLostError``: one ``ddpimg: error:``
naming the lost ranks with their hosts, last step and phase and how long ago, the ranks that
were waiting, the last valid checkpoint and, with NCCL, where the flight recorder dumped;
exit status 5 (``exitcodes.RANK_LOST``), recorded by rank 0 in manifest.json.

Bounded, whatever stalls: the backstop in the watch thread gives up for a training loop
that stays in one phase longer than ``--timeout`` + grace (NCCL: ``--timeout``; NCCL's own
watchdog is pushed to ``--timeout`` + 40 s so that ddpimg speaks first; not during setup,
which every rank may spend long in at once), and a rank whose process does
not run at all (SIGSTOP, a freeze) is killed with SIGKILL, by PID, by its own sentinel
process once it has not run for ``--timeout`` + grace (``sentinel.py``). Every process of
the run has then exited within ``--timeout`` + 20 s of the stall (plus the step that was
under way and the time to exit). ``DDPIMG_STALL_WATCH=0`` turns all of this off.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from ddpimg.runtime.stall.watch import Board, StallLimits, StallWatch

if TYPE_CHECKING:
    from ddpimg.errors import RankLostError
    from ddpimg.runtime.context import DistContext

__all__ = ["StallLimits", "StallWatch", "open_watch", "watch_enabled", "watch_store"]

SWITCH = "DDPIMG_STALL_WATCH"


def watch_enabled(env: Mapping[str, str], world_size: int) -> bool:
    """Whether a run of ``world_size`` ranks gets a stall watch: not for one process (no
    one to wait for), not with ``DDPIMG_STALL_WATCH=0``."""
    return world_size > 1 and env.get(SWITCH, "1").strip() != "0"


def open_watch(
    ctx: DistContext,
    host: str,
    on_fatal: Callable[[RankLostError], None] | None = None,
    env: Mapping[str, str] = os.environ,
) -> StallWatch | None:
    """This rank's watch (not started), with a client of its own to the rendezvous store
    and the job's key for its records (``store_auth.shared_key``: collective unless
    ``DDPIMG_STORE_KEY`` is set); None when ``watch_enabled`` says no or the context has no
    store address."""
    from ddpimg.runtime.store_auth import shared_key

    master, port = ctx.run_info.get("master_addr"), ctx.run_info.get("master_port")
    if not watch_enabled(env, ctx.world_size) or not master or not port:
        return None
    return watch_store(
        str(master),
        int(port),
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout_s=ctx.timeout_s,
        backend=ctx.backend,
        host=host,
        key=shared_key(ctx.device, env),
        on_fatal=on_fatal,
        env=env,
    )


def watch_store(
    master: str,
    port: int,
    *,
    rank: int,
    world_size: int,
    timeout_s: float,
    backend: str,
    host: str,
    key: bytes,
    on_fatal: Callable[[RankLostError], None] | None = None,
    env: Mapping[str, str] = os.environ,
    script: bool = False,
) -> StallWatch:
    """The watch (not started) of ``rank`` over the rendezvous store at ``master:port``,
    through a client of its own, its records sealed with the job's ``key``. ``script``:
    see ``StallWatch``."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]  # public re-export

    from ddpimg.runtime.flight_recorder import dump_directory
    from ddpimg.runtime.store_auth import RecordSeal

    limits = StallLimits.for_timeout(timeout_s, backend, script=script)
    store = TCPStore(
        master,
        port,
        is_master=False,
        timeout=timedelta(seconds=limits.store_s),
        wait_for_workers=False,
    )
    board = Board(store, world_size, f"{master}:{port}", limits.store_s, RecordSeal(key))
    return StallWatch(
        board,
        rank=rank,
        host=host,
        limits=limits,
        flight_recorder=dump_directory(env, backend),
        on_fatal=on_fatal,
        script=script,
    )
