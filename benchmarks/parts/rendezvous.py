"""The join of 64 local processes on one TCPStore, and the report when one of the 64 never
arrives."""

from __future__ import annotations

import math
import multiprocessing
import time
from typing import Any

from parts.common import Row, free_port


def _join_worker(
    rank: int, world: int, port: int, timeout_s: float, *, go: Any, results: Any
) -> None:
    from ddpimg.errors import RendezvousError
    from ddpimg.runtime.rendezvous import join, open_store

    # Rank 0's store is up before the clock starts, as it is when rank 0 starts first; the
    # others connect and join after ``go``.
    store = open_store("127.0.0.1", port, 0, timeout_s + 30, False) if rank == 0 else None
    go.wait()
    connected = math.nan
    try:
        if store is None:
            store = open_store("127.0.0.1", port, rank, timeout_s + 30, use_agent_store=False)
        connected = time.monotonic()
        join(
            store,
            rank=rank,
            world_size=world,
            hostname="localhost",
            timeout_s=timeout_s,
            host_of_rank=lambda _rank: "localhost",
        )
        results.put((rank, time.monotonic(), "ok", connected))
    except RendezvousError as err:
        results.put((rank, time.monotonic(), str(err), connected))
    except Exception as err:  # reported in the table rather than hanging the driver
        results.put((rank, time.monotonic(), f"{type(err).__name__}: {err}", connected))
    # Rank 0 serves the store: it stays until every other rank has read the verdict.
    if rank == 0:
        time.sleep(2.0)


def _join_once(world: int, absent: int | None, timeout_s: float) -> dict[str, Any]:
    import torch  # noqa: F401  imported once here, so the forked workers start at once

    context = multiprocessing.get_context("fork")
    go = context.Event()
    results = context.Queue()
    port = free_port()
    workers = [
        context.Process(
            target=_join_worker,
            args=(rank, world, port, timeout_s),
            kwargs={"go": go, "results": results},
        )
        for rank in range(world)
        if rank != absent
    ]
    for worker in workers:
        worker.start()
    time.sleep(3.0)  # let every worker reach go.wait() and rank 0 open the store
    began = time.monotonic()
    go.set()
    outcomes = [results.get(timeout=timeout_s + 60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    rank0 = next(outcome for outcome in outcomes if outcome[0] == 0)
    return {
        "world": world,
        "absent": absent,
        "timeout_s": timeout_s,
        "rank0_verdict_s": rank0[1] - began,
        "last_rank_s": max(outcome[1] for outcome in outcomes) - began,
        "verdict": rank0[2],
        "last_connected_s": max(
            (outcome[3] for outcome in outcomes if not math.isnan(outcome[3])), default=began
        )
        - began,
        "all_same_verdict": len({outcome[2] for outcome in outcomes}) == 1,
    }


def run(world: int, timeout_s: float) -> tuple[list[Row], dict[str, Any]]:
    joined = _join_once(world, None, 60.0)
    missing = _join_once(world, world - 1, timeout_s)
    rows: list[Row] = [
        (
            f"rendezvous join, {world} local processes on one TCPStore",
            f"last rank connected to the store after {joined['last_connected_s']:.2f} s; "
            f"verdict '{joined['verdict']}' at rank 0 "
            f"{joined['rank0_verdict_s'] - joined['last_connected_s']:.2f} s later; all "
            f"released at {joined['last_rank_s']:.2f} s",
            "",
        ),
        (
            f"rendezvous, rank {world - 1} of {world} never starts (timeout {timeout_s:g} s)",
            f"reported after {missing['rank0_verdict_s']:.2f} s on rank 0, "
            f"{missing['last_rank_s']:.2f} s on all; rank 0 says: "
            f"{missing['verdict'].splitlines()[0][:90]}",
            "names the rank and host",
        ),
    ]
    return rows, {"all_joined": joined, "one_missing": missing}
