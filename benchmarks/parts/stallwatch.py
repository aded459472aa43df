"""What recording every rank's progress costs (``ddpimg.runtime.stall``):

* ``RankProgress.enter``, the training thread's only work for it: one tuple assignment and a
  clock read per phase, about five phases a step; nanoseconds per call.
* One heartbeat publication: a TCPStore ``set`` of the record on loopback, made by the
  watch's own thread once a heartbeat (``--timeout``/20, 0.5-2 s); microseconds per call.
* The loop with the watch against the loop without it (``DDPIMG_STALL_WATCH=0``): mnist on
  two local ranks (``--nproc-per-node 2``, Gloo), steady steps/s, the watch at its shortest
  heartbeat (``--timeout 10``: 0.5 s); the ratio is taken within each round, the order of
  the two runs shuffled per round.
"""

from __future__ import annotations

import functools
import secrets
import statistics
import time
from datetime import timedelta
from typing import Any

from ddpimg.runtime.stall import record
from ddpimg.runtime.stall.record import ProgressRecord
from ddpimg.runtime.stall.watch import Board, RankProgress
from ddpimg.runtime.store_auth import RecordSeal
from parts.common import Row, free_port, interleaved, run_train, spread

ENTER_CALLS = 200_000
PUBLISH_CALLS = 2_000
BLOCKS = 5
TRAIN = [
    "mnist", "--nproc-per-node", "2", "--batch-size", "64", "--train-samples", "19200",
    "--eval-samples", "64", "--timeout", "10",
]  # fmt: skip
STEPS, WARMUP = 150, 20


def _enter_ns() -> float:
    """Median over blocks of the time of one ``enter`` call."""
    progress = RankProgress()
    blocks = []
    for _ in range(BLOCKS):
        began = time.perf_counter()
        for step in range(ENTER_CALLS):
            progress.enter(record.FORWARD, step)
        blocks.append((time.perf_counter() - began) / ENTER_CALLS * 1e9)
    return statistics.median(blocks)


def _publish_us() -> float:
    """Median over blocks of one record published to a TCPStore on loopback."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]  # public re-export

    port = free_port()
    server = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    client = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))
    board = Board(client, 2, f"127.0.0.1:{port}", 5.0, RecordSeal(secrets.token_bytes(32)))
    item = ProgressRecord(1, "node1", 4242, 10, 3, record.BACKWARD, time.time(), time.time())
    blocks = []
    for _ in range(BLOCKS):
        began = time.perf_counter()
        for _ in range(PUBLISH_CALLS):
            board.publish(item, lambda: True)
        client.get(record.record_key(1))  # the sets are one-way: wait until they are served
        blocks.append((time.perf_counter() - began) / PUBLISH_CALLS * 1e6)
    del server
    return statistics.median(blocks)


def _steps_per_s(watch: bool) -> float:
    run = run_train(
        TRAIN,
        steps=STEPS,
        warmup=WARMUP,
        extra_env={} if watch else {"DDPIMG_STALL_WATCH": "0"},
    )
    return run.steady_steps_per_s


def run(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    enter_ns = _enter_ns()
    publish_us = _publish_us()
    rounds = interleaved(
        {
            "watch": functools.partial(_steps_per_s, True),
            "no watch": functools.partial(_steps_per_s, False),
        },
        repeats,
        "stall watch",
    )
    ratio = spread([r["watch"] / r["no watch"] for r in rounds])
    steps = spread([r["no watch"] for r in rounds])["median"]
    rows: list[Row] = [
        (
            "stall watch: RankProgress.enter on the training thread (about 5 a step)",
            f"{enter_ns:.0f} ns per call (median of {BLOCKS} blocks of {ENTER_CALLS})",
            "",
        ),
        (
            "stall watch: one heartbeat record to the rendezvous store (watch thread)",
            f"{publish_us:.1f} us per set on loopback (median of {BLOCKS} blocks of "
            f"{PUBLISH_CALLS})",
            "",
        ),
        (
            f"stall watch: mnist, 2 local ranks, steps/s with the watch / without "
            f"(DDPIMG_STALL_WATCH=0), heartbeat 0.5 s ({repeats} rounds; without "
            f"{steps:.1f} steps/s)",
            f"median {ratio['median']:.3f}x (min {ratio['min']:.3f}, max {ratio['max']:.3f})",
            "no measurable slowdown (within the rounds' spread)",
        ),
    ]
    record_ = {"enter_ns": enter_ns, "publish_us": publish_us, "rounds": rounds}
    return rows, record_
