"""Real gloo process groups of a few ranks on this machine, for tests of collectives."""

from __future__ import annotations

import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

# A hang guard (and the group's collective timeout): more than 5x the slowest use measured
# in the unit tests, two ranks of test_ddp.py, 29 s on a busy 2-core machine.
RANKS_TIMEOUT_S = 150.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class _Group:
    world_size: int
    # The ranks meet through a file, not a port: a port chosen free here could be taken
    # (an outgoing connection's ephemeral port) in the seconds the spawned ranks take to
    # import torch.
    store_file: str
    timeout_s: float


def _entry(rank: int, work: Callable[..., None], group: _Group, args: tuple[Any, ...]) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"file://{group.store_file}",
        rank=rank,
        world_size=group.world_size,
        timeout=timedelta(seconds=group.timeout_s),
    )
    try:
        work(rank, *args)
    finally:
        dist.destroy_process_group()


def run_ranks(
    work: Callable[..., None], world_size: int, *args: Any, timeout_s: float = RANKS_TIMEOUT_S
) -> None:
    """Run ``work(rank, *args)`` in ``world_size`` spawned processes that form a gloo group
    (meeting through a file store); fail the test when one fails or they outlive
    ``timeout_s``, a hang guard. ``work`` must be a module-level function (spawn pickles
    it)."""
    rendezvous = tempfile.TemporaryDirectory(prefix="ddpimg-ranks-")
    store_file = f"{rendezvous.name}/store"
    processes = mp.start_processes(
        _entry,
        args=(work, _Group(world_size, store_file, timeout_s), args),
        nprocs=world_size,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + timeout_s
    try:
        while not processes.join(timeout=1.0):
            if time.monotonic() > deadline:
                pytest.fail(
                    f"killed by its hang guard: {world_size} gloo ranks still running after "
                    f"{timeout_s:.0f} s (5x or more the time they take on a 2-core machine)"
                )
    finally:
        for process in processes.processes:
            if process.is_alive():
                process.kill()
                process.join()
        rendezvous.cleanup()
