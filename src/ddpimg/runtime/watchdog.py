"""A deadline for calls that can block far longer than ``--timeout`` says.

Once every rank has joined the rendezvous, ``init_process_group`` makes Gloo connect every
pair of ranks over the interface GLOO_SOCKET_IFNAME names (or the one the host name
resolves to). When those addresses cannot reach each other, Gloo retries until its own
connect timeout, which ``--timeout`` does not shorten, so the job would hang for minutes with
nothing said. The watchdog ends the process at the deadline instead, with a message that
says which interfaces were in use, and exit status 3 (as for a failed rendezvous).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ddpimg import exitcodes
from ddpimg.errors import DdpimgError, RendezvousError, report


def _expire(error: Callable[[], DdpimgError]) -> None:
    err = error()
    report(err)
    # A thread cannot interrupt the call that blocks the main thread (it waits in C++):
    # ending the process is the only way to keep the deadline.
    os._exit(exitcodes.for_error(err))


@contextmanager
def deadline(seconds: float, error: Callable[[], DdpimgError]) -> Iterator[None]:
    """End the process reporting ``error()`` (with its exit status: 3 for a
    RendezvousError) unless the block is left within ``seconds``."""
    timer = threading.Timer(seconds, _expire, args=(error,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def collectives_stalled(
    backend: str, timeout_s: float, rank: int, env: dict[str, str]
) -> RendezvousError:
    """What to say when ``init_process_group`` outlives the timeout after a good join."""
    names = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
    chosen = ", ".join(f"{name}={env[name]}" for name in names if env.get(name))
    if not chosen:
        chosen = "no GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME set: the host name's interface"
    return RendezvousError(
        f"rank {rank}: every rank joined the rendezvous, but init_process_group ({backend}) "
        f"did not finish within {timeout_s:g} s: the ranks' own connections do not reach each "
        f"other ({chosen})",
        hint="name the fabric interface in the site profile's network.interfaces (ddpimg "
        "doctor lists each host's interfaces and addresses; docs/troubleshooting.md)",
    )
