"""Real gloo process groups of a few ranks on this machine, for tests of collectives."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

RANKS_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _entry(
    rank: int, work: Callable[..., None], world_size: int, port: int, args: tuple[Any, ...]
) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=RANKS_TIMEOUT_S),
    )
    try:
        work(rank, *args)
    finally:
        dist.destroy_process_group()


def run_ranks(work: Callable[..., None], world_size: int, *args: Any) -> None:
    """Run ``work(rank, *args)`` in ``world_size`` spawned processes that form a gloo group
    on loopback; fail the test when one fails or they take longer than RANKS_TIMEOUT_S.
    ``work`` must be a module-level function (spawn pickles it)."""
    processes = mp.start_processes(
        _entry,
        args=(work, world_size, free_port(), args),
        nprocs=world_size,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + RANKS_TIMEOUT_S
    try:
        while not processes.join(timeout=1.0):
            if time.monotonic() > deadline:
                pytest.fail(f"{world_size} gloo ranks did not finish in {RANKS_TIMEOUT_S:.0f} s")
    finally:
        for process in processes.processes:
            if process.is_alive():
                process.kill()
                process.join()
