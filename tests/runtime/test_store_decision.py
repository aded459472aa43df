"""A decision of rank 0 reaches every rank through the store, an error as the same error;
rank 0 keeps the store up until the others have read its error."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from torch.distributed import TCPStore  # type: ignore[attr-defined]

from ddpimg.errors import DataError, DdpimgError, RendezvousError
from ddpimg.runtime.store_auth import RecordSeal
from ddpimg.runtime.store_decision import READ_SUFFIX, decided_by_rank0
from tests.train.ranks import free_port

KEY = bytes(range(32))
NAME = "ddpimg/test/decision"
TIMEOUT_S = 60.0  # a hang guard: each wait here ends in well under a second


@pytest.fixture
def port() -> Iterator[int]:
    chosen = free_port()
    server = TCPStore("127.0.0.1", chosen, is_master=True, wait_for_workers=False)
    yield chosen
    del server


def client(port: int) -> TCPStore:
    return TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=TIMEOUT_S))


def refuse() -> str:
    raise DataError("--out x holds a completed run", hint="use another --out")


def as_rank(port: int, rank: int, decide: Callable[[], str] = refuse) -> str:
    return decided_by_rank0(
        client(port), NAME, KEY, rank=rank, world_size=3, timeout_s=TIMEOUT_S, decide=decide
    )


def test_every_rank_gets_rank_0s_value(port: int) -> None:
    assert as_rank(port, 0, lambda: "runs/mnist-7") == "runs/mnist-7"
    assert [as_rank(port, rank) for rank in (1, 2)] == ["runs/mnist-7"] * 2


def test_an_error_is_every_ranks_and_rank_0_waits_until_they_read_it(port: int) -> None:
    failures: dict[int, BaseException] = {}
    ended: dict[int, float] = {}

    def rank(number: int) -> None:
        try:
            as_rank(port, number)
        except DdpimgError as err:
            failures[number] = err
        ended[number] = time.monotonic()

    zero = threading.Thread(target=rank, args=(0,))
    zero.start()
    time.sleep(0.3)  # rank 0 has decided and waits: its readers come later
    assert zero.is_alive()
    for number in (1, 2):
        rank(number)
    zero.join(TIMEOUT_S)
    assert {type(err) for err in failures.values()} == {DataError}
    assert {str(err) for err in failures.values()} == {
        "--out x holds a completed run\n  hint: use another --out"
    }
    assert ended[0] >= max(ended[1], ended[2])
    assert client(port).add(NAME + READ_SUFFIX, 0) == 2


def test_an_unforeseen_error_on_rank_0_ends_every_rank(port: int) -> None:
    """Not a DdpimgError (a runs root it may not list): raised as itself on rank 0, named on
    the others, which would otherwise wait for a decision until --timeout."""

    def crash() -> str:
        raise PermissionError(13, "Permission denied", "runs")

    raised: dict[int, str] = {}

    def rank(number: int) -> None:
        try:
            as_rank(port, number, crash)
        except (PermissionError, RuntimeError) as err:
            raised[number] = f"{type(err).__name__}: {err}"

    zero = threading.Thread(target=rank, args=(0,))
    zero.start()
    for number in (1, 2):
        rank(number)
    zero.join(TIMEOUT_S)
    said = "PermissionError: [Errno 13] Permission denied: 'runs'"
    assert raised == {
        0: said,
        1: f"RuntimeError: rank 0 failed while deciding {NAME}: {said}",
        2: f"RuntimeError: rank 0 failed while deciding {NAME}: {said}",
    }


def test_rank_0_waits_no_longer_than_its_timeout(port: int) -> None:
    began = time.monotonic()
    with pytest.raises(DataError):
        decided_by_rank0(
            client(port), NAME, KEY, rank=0, world_size=2, timeout_s=0.5,
            decide=refuse,
        )  # fmt: skip
    assert time.monotonic() - began >= 0.5


@pytest.mark.parametrize("sealed_with", [None, bytes(32)], ids=["unsealed", "another-key"])
def test_a_decision_without_the_jobs_key_is_refused(port: int, sealed_with: bytes | None) -> None:
    forged = '{"value": "/etc"}'
    value = forged if sealed_with is None else RecordSeal(sealed_with).seal(NAME, forged)
    client(port).set(NAME, value)
    with pytest.raises(RendezvousError, match=r"rank 1: rank 0's decision .* does not carry"):
        as_rank(port, 1)
