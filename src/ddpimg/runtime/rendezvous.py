"""Meeting of the ranks: a join check over the rendezvous store, then the process group.

``init_process_group`` alone hangs until its timeout when a rank never starts, and then says
only "timed out". Before it, every rank checks in on the TCP store under its rank with its
host name; rank 0 waits (bounded) until all have, reporting progress, and publishes a verdict.
When ranks are missing at the deadline rank 0 names them and their hosts, and every rank that
did arrive exits non-zero. The same store then backs the process group, so one port is used.

Rank 0's store listens on the master address only (``listen_socket``), the address the
site's rule gives the other ranks, not on every interface as TCPStore does by default: a
network that the rule leaves out (the Ethernet beside the fabric, a login network) cannot
reach it. When the master address is not one of rank 0's own (a name of another
interface, a load balancer), torch's default is kept.
"""

from __future__ import annotations

import errno
import socket
import sys
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from ddpimg.errors import RendezvousError, StartStopped
from ddpimg.runtime.interruptible import heeding

if TYPE_CHECKING:
    # The public name torch.distributed.Store is a re-export mypy does not see.
    from torch._C._distributed_c10d import Store

JOINED_COUNTER = "ddpimg/joined"
JOIN_KEY = "ddpimg/join/{rank}"
VERDICT_KEY = "ddpimg/verdict"
VERDICT_OK = "ok"
READ_COUNTER = "ddpimg/verdict-read"
READERS_GRACE_S = 10.0
PROGRESS_EVERY_S = 30.0
# Rank 0 names the first MISSING_NAMED missing ranks among the first MISSING_SCAN (one store
# lookup each: the message costs the same for any world size) and counts the rest.
MISSING_SCAN = 1024
MISSING_NAMED = 32
# How often a waiting rank looks at the store and at ``stop`` (a signal ends the wait).
POLL_S = 0.5
# A signal that asks the rank to stop, if one arrived ("SIGTERM"), else None.
Stop = Callable[[], "str | None"]


def no_signal() -> str | None:
    return None


def agent_store(env: Mapping[str, str]) -> bool:
    """Whether torchrun's agent serves the rendezvous store (``--nproc-per-node``, torchrun):
    then rank 0 only connects to it, and the store outlives the workers."""
    return env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"


def open_store(
    master_addr: str,
    master_port: int,
    rank: int,
    timeout_s: float,
    use_agent_store: bool,
    *,
    stop: Stop = no_signal,
) -> Store:
    """Rank 0 hosts the store (unless torchrun's agent already does); others connect, as
    long as it takes rank 0 to start (``timeout_s``), hearing ``stop`` meanwhile."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]  # public, re-exported

    is_server = rank == 0 and not use_agent_store

    def connect() -> Store:
        listening = listen_socket(master_addr, master_port) if is_server else None
        return TCPStore(
            master_addr,
            master_port,
            is_master=is_server,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
            multi_tenant=True,
            master_listen_fd=None if listening is None else listening.detach(),
        )

    try:
        if is_server:  # listens at once
            return connect()
        return heeding(connect, lambda: stopped_start(stop, rank), POLL_S)
    except StartStopped:
        raise
    except Exception as err:  # TCPStore raises DistNetworkError / DistStoreError / RuntimeError
        if is_server:
            raise RendezvousError(
                f"rank 0 could not open the rendezvous store on port {master_port}: {err}",
                hint="another job may use that port: export MASTER_PORT=<free port> or "
                "change the profile's network.port_range",
            ) from err
        raise RendezvousError(
            f"rank {rank} could not reach rank 0's rendezvous store at {master_addr}:"
            f"{master_port} within {timeout_s:g} s: {err}",
            hint="rank 0 never started, or MASTER_ADDR is not reachable from this node (wrong "
            "interface or name); check `ddpimg env --explain` and the site profile's "
            "network.master_addr",
        ) from err


def listen_socket(address: str, port: int) -> socket.socket | None:
    """A TCP socket listening on ``address`` (its first resolved address that is this
    host's) at ``port``, for the store to serve on; None when ``address`` resolves to none
    of this host's addresses. A port in use raises OSError, as TCPStore's own bind would."""
    try:
        candidates = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return None
    for family, kind, protocol, _, where in candidates:
        sock = socket.socket(family, kind, protocol)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(where)
            sock.listen(socket.SOMAXCONN)
        except OSError as err:
            sock.close()
            if err.errno != errno.EADDRNOTAVAIL:
                raise
            continue
        return sock
    return None


def describe_missing(missing: list[int], host_of_rank: Callable[[int], str | None]) -> str:
    """'ranks 2, 3 (host node2)' — grouped by host, hosts unknown when the launcher hides them."""
    by_host: dict[str, list[int]] = {}
    for rank in missing:
        by_host.setdefault(host_of_rank(rank) or "host unknown", []).append(rank)
    parts = []
    for host, ranks in by_host.items():
        label = "rank" if len(ranks) == 1 else "ranks"
        where = host if host == "host unknown" else f"host {host}"
        parts.append(f"{label} {', '.join(map(str, ranks))} ({where})")
    return "; ".join(parts)


def join(
    store: Store,
    *,
    rank: int,
    world_size: int,
    hostname: str,
    timeout_s: float,
    host_of_rank: Callable[[int], str | None],
    stop: Stop = no_signal,
) -> None:
    """Check in, and on rank 0 wait for everyone. Raises RendezvousError on every arrived rank
    when someone is missing at the deadline. Every wait looks at ``stop`` twice a second: a
    preemption signal (SIGTERM, SIGUSR2) ends it at once with a ``StartStopped``."""
    store.set(JOIN_KEY.format(rank=rank), hostname)
    store.add(JOINED_COUNTER, 1)
    if rank == 0:
        verdict = _wait_for_all(store, world_size, timeout_s, host_of_rank, stop)
        store.set(VERDICT_KEY, verdict)
        if verdict != VERDICT_OK:
            # Rank 0 hosts the store: leaving at once would cut off the ranks still reading
            # the verdict, which would then die on a bare network error instead of this one.
            _wait_for_readers(store, store.add(JOINED_COUNTER, 0) - 1)
    else:
        verdict = _wait_for_verdict(store, rank, timeout_s + 30, stop)
    if verdict != VERDICT_OK:
        raise RendezvousError(verdict, hint=_MISSING_HINT)


def stopped_start(stop: Stop, rank: int, where: str = "the ranks were meeting") -> None:
    """Raise ``StartStopped`` if a preemption signal arrived (``stop``) while ``where``."""
    received = stop()
    if received is not None:
        raise StartStopped(
            f"{received} arrived while {where}, before the first step: nothing to save (the "
            "job can be requeued; the same command starts from the last checkpoint)",
            rank=rank,
        )


def _wait_for_verdict(store: Store, rank: int, limit_s: float, stop: Stop) -> str:
    """Rank 0's verdict, looked for every ``POLL_S`` (a blocking wait in the store's client
    would not return for a signal)."""
    deadline = time.monotonic() + limit_s
    try:
        while not store.check([VERDICT_KEY]):
            stopped_start(stop, rank)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no verdict after {limit_s:g} s")
            time.sleep(POLL_S)
        verdict: str = store.get(VERDICT_KEY).decode()
        store.add(READ_COUNTER, 1)
    except StartStopped:
        raise
    except Exception as err:
        raise RendezvousError(
            f"rank {rank} got no word from rank 0 within {limit_s:g} s: {err}",
            hint="rank 0 may have died; see its log",
        ) from err
    return verdict


def _wait_for_readers(store: Store, readers: int) -> None:
    """Bounded wait until ``readers`` other ranks have read a failed verdict."""
    deadline = time.monotonic() + READERS_GRACE_S
    while store.add(READ_COUNTER, 0) < readers and time.monotonic() < deadline:
        time.sleep(0.05)


_MISSING_HINT = (
    "look at those ranks' logs: a node that failed to start the container, a wrong "
    "MASTER_ADDR for that node's network, or a task that crashed before the rendezvous"
)


def _wait_for_all(
    store: Store,
    world_size: int,
    timeout_s: float,
    host_of_rank: Callable[[int], str | None],
    stop: Stop = no_signal,
) -> str:
    start = time.monotonic()
    deadline = start + timeout_s
    next_report = start + PROGRESS_EVERY_S
    delay = 0.01
    while True:
        joined = store.add(JOINED_COUNTER, 0)
        if joined >= world_size:
            return VERDICT_OK
        stopped_start(stop, 0)
        now = time.monotonic()
        if now >= deadline:
            break
        if now >= next_report:
            print(
                f"ddpimg: rendezvous: {joined}/{world_size} ranks joined after "
                f"{now - start:.0f} s (deadline {timeout_s:g} s)",
                file=sys.stderr,
                flush=True,
            )
            next_report += PROGRESS_EVERY_S
        time.sleep(min(delay, max(deadline - now, 0.0)))
        delay = min(delay * 2, POLL_S)
    count = world_size - store.add(JOINED_COUNTER, 0)
    scanned = range(min(world_size, MISSING_SCAN))
    missing = [r for r in scanned if not store.check([JOIN_KEY.format(rank=r)])][:MISSING_NAMED]
    unnamed = count - len(missing)
    if not missing:  # none among the first MISSING_SCAN ranks: no names to give
        return f"{count} of {world_size} ranks never joined the rendezvous within {timeout_s:g} s"
    return (
        f"{count} of {world_size} ranks never joined the rendezvous within "
        f"{timeout_s:g} s: {describe_missing(missing, host_of_rank)}"
        + (f"; and {unnamed} more" if unnamed > 0 else "")
    )
