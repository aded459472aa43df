"""ddpimg's store records are sealed with the job's key: a process without it cannot forge a
record or a verdict that names a rank, and the ranks share one key that nobody else sees."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from torch.distributed import TCPStore  # type: ignore[attr-defined]

from ddpimg.errors import LauncherError
from ddpimg.runtime.stall import record as phases
from ddpimg.runtime.stall.record import ProgressRecord, record_key
from ddpimg.runtime.stall.verdict import LostRank, Verdict
from ddpimg.runtime.stall.watch import VERDICT_KEY, Board, StallLimits, StallWatch
from ddpimg.runtime.store_auth import (
    KEY_VARIABLE,
    RecordSeal,
    key_from_env,
    new_key_hex,
    shared_key,
)
from tests.train.ranks import free_port, run_ranks

KEY = bytes(range(32))
LIMITS = StallLimits.for_timeout(2.0, "gloo")


def test_a_sealed_value_opens_only_with_its_key_under_its_name() -> None:
    seal = RecordSeal(KEY)
    value = seal.seal("ddpimg/progress/1", '{"step": 3}').encode()
    assert seal.open("ddpimg/progress/1", value) == '{"step": 3}'
    assert RecordSeal(bytes(32)).open("ddpimg/progress/1", value) is None  # another key
    assert seal.open("ddpimg/progress/0", value) is None  # replayed as another rank's
    tampered = value.replace(b"3", b"4")
    assert seal.open("ddpimg/progress/1", tampered) is None
    for garbage in (b"", b'{"step": 3}', b":" + value, b"x" * 64 + b":{}"):
        assert seal.open("ddpimg/progress/1", garbage) is None


def test_the_key_in_the_environment_is_64_hex_digits() -> None:
    assert key_from_env({}) is None
    fresh = new_key_hex()
    assert key_from_env({KEY_VARIABLE: fresh}) == bytes.fromhex(fresh)
    for bad in ("abc", "zz" * 32, fresh[:-2]):
        with pytest.raises(LauncherError, match=f"{KEY_VARIABLE} must be 64 hex digits"):
            key_from_env({KEY_VARIABLE: bad})


def _share(rank: int, out: Path) -> None:
    key = shared_key(torch.device("cpu"), env={})
    (out / f"key-{rank}").write_bytes(key)


def test_the_ranks_share_rank_0s_fresh_key_over_the_process_group(tmp_path: Path) -> None:
    keys = []
    for attempt in range(2):
        out = tmp_path / str(attempt)
        out.mkdir()
        run_ranks(_share, 2, out)
        first, second = ((out / f"key-{rank}").read_bytes() for rank in range(2))
        assert first == second
        assert len(first) == 32
        keys.append(first)
    assert keys[0] != keys[1]  # one per job


def test_a_store_key_needs_the_environment_or_a_process_group() -> None:
    with pytest.raises(RuntimeError, match=f"no {KEY_VARIABLE} and no process group"):
        shared_key(torch.device("cpu"), env={})


@pytest.fixture
def port() -> Iterator[int]:
    chosen = free_port()
    server = TCPStore("127.0.0.1", chosen, is_master=True, wait_for_workers=False)
    yield chosen
    del server


def _board(port: int, key: bytes) -> Board:
    client = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=5))
    return Board(client, 2, f"127.0.0.1:{port}", LIMITS.store_s, RecordSeal(key))


def assert_genuine(found: ProgressRecord | None) -> None:
    assert found is not None
    assert (found.state, found.step, found.error) == ("running", 7, "")


def test_records_and_verdicts_forged_without_the_key_are_ignored(port: int) -> None:
    """A process that reaches the store writes what the ranks would: a record saying rank
    1 failed, and a verdict naming rank 0. Neither is read; rank 1's own record is."""
    watch = StallWatch(_board(port, KEY), rank=1, host="host1", limits=LIMITS, sentinel=False)
    watch.progress.enter(phases.FORWARD, 7)
    watch.board.register()
    watch.board.publish_bounded(watch.record())
    intruder = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=5))
    now = time.time()
    forged = ProgressRecord(1, "host1", 1, 99, 7, "forward", now, now, "failed", "forged")
    forged_verdict = Verdict(0, now, lost=(LostRank(0, "failed", "host0", 1, 7, "forward"),))
    reader = _board(port, KEY)
    assert_genuine(reader.read_all()[1])
    # Unsealed, and sealed with another key.
    for value in (forged.to_text(), RecordSeal(bytes(32)).seal(record_key(1), forged.to_text())):
        intruder.set(record_key(1), value)
        intruder.set(VERDICT_KEY, json.dumps(forged_verdict.to_json()))
        assert reader.read_all()[1] is None  # hidden until rank 1 publishes again
        assert reader.wait_verdict(0.5) is None
    watch.board.publish_bounded(watch.record())
    assert_genuine(reader.read_all()[1])


BROADCAST = """
import sys
from datetime import timedelta
from torch.distributed import TCPStore, is_initialized
from ddpimg.runtime.store_auth import broadcast_key
rank, port = int(sys.argv[1]), int(sys.argv[2])
store = TCPStore("127.0.0.1", port, is_master=rank == 0, wait_for_workers=False,
                 timeout=timedelta(seconds=30))
key = broadcast_key(store, rank, 2, 30.0)
print(key.hex(), is_initialized())
"""


def test_a_scripts_ranks_share_a_key_before_any_process_group(tmp_path: Path) -> None:
    """Under train --script the boot shares the key over a Gloo group of its own, and leaves
    no default process group behind for the script to trip over."""
    import subprocess
    import sys

    port = str(free_port())
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", BROADCAST, str(rank), port],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = []
    for proc in ranks:
        try:
            stdout, stderr = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            pytest.fail("killed by its hang guard: the key broadcast took more than 120 s")
        assert proc.returncode == 0, stderr
        outputs.append(stdout.split())
    (key0, group0), (key1, group1) = outputs
    assert key0 == key1
    assert len(bytes.fromhex(key0)) == 32
    assert (group0, group1) == ("False", "False")
