from __future__ import annotations

import subprocess
import threading
import time

import pytest

from ddpimg import exitcodes
from ddpimg.errors import RendezvousError, StartStopped
from ddpimg.runtime.rendezvous import describe_missing, join, listen_socket, open_store
from tests.train.ranks import free_port

torch_distributed = pytest.importorskip("torch.distributed")


def hosts(rank: int) -> str | None:
    return {0: "n1", 1: "n1", 2: "n2", 3: "n2"}.get(rank)


@pytest.mark.parametrize(
    ("missing", "expected"),
    [
        ([3], "rank 3 (host n2)"),
        ([2, 3], "ranks 2, 3 (host n2)"),
        ([1, 2], "rank 1 (host n1); rank 2 (host n2)"),
        ([7], "rank 7 (host unknown)"),
    ],
)
def test_missing_ranks_are_grouped_by_host(missing: list[int], expected: str) -> None:
    assert describe_missing(missing, hosts) == expected


def test_everyone_joins() -> None:
    store = torch_distributed.HashStore()
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            join(store, rank=r, world_size=3, hostname=f"h{r}", timeout_s=10, host_of_rank=hosts)
        except BaseException as err:  # collected and asserted below
            errors.append(err)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []


def test_rank_0_names_who_never_came_and_the_others_learn_it() -> None:
    store = torch_distributed.HashStore()
    seen: dict[int, str] = {}

    def rank(r: int) -> None:
        try:
            join(store, rank=r, world_size=4, hostname=f"h{r}", timeout_s=0.5, host_of_rank=hosts)
        except RendezvousError as err:
            seen[r] = str(err)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert set(seen) == {0, 1}
    assert seen[0].startswith(
        "2 of 4 ranks never joined the rendezvous within 0.5 s: ranks 2, 3 (host n2)"
    )
    assert seen[1] == seen[0]


def _listening(port: int) -> list[str]:
    """The local addresses that listen on ``port`` (``ss``, iproute2)."""
    table = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3] for line in table.splitlines() if line.split()[3].endswith(f":{port}")]


def test_rank_0s_store_listens_on_the_master_address_only() -> None:
    port = free_port()
    server = open_store("127.0.0.1", port, rank=0, timeout_s=5, use_agent_store=False)
    client = open_store("127.0.0.1", port, rank=1, timeout_s=5, use_agent_store=False)
    client.set("k", "v")
    assert server.get("k") == b"v"
    assert _listening(port) == [f"127.0.0.1:{port}"]  # not 0.0.0.0 nor [::]


def test_a_master_address_of_another_host_keeps_torchs_default() -> None:
    assert listen_socket("192.0.2.1", free_port()) is None  # TEST-NET-1: never this host's


def test_a_huge_world_is_named_in_bounded_time() -> None:
    """Rank 0 names a few missing ranks and counts the rest: four billion missing ranks
    (WORLD_SIZE=4294967297, now refused by the topology) once took minutes of lookups."""
    store = torch_distributed.HashStore()
    with pytest.raises(RendezvousError) as err:
        join(store, rank=0, world_size=2**32 + 1, hostname="h0", timeout_s=0.1,
             host_of_rank=lambda r: None)  # fmt: skip
    message = err.value.message
    assert message.startswith(f"{2**32} of {2**32 + 1} ranks never joined the rendezvous")
    named = ", ".join(str(rank) for rank in range(1, 33))
    assert message.endswith(f"ranks {named} (host unknown); and {2**32 - 32} more")


@pytest.mark.parametrize("rank", [0, 1])
def test_a_preemption_signal_ends_the_wait_at_once(rank: int) -> None:
    """Rank 0 waiting for the others and a rank waiting for rank 0's verdict both stop at a
    signal (``stop`` says which) instead of waiting out the timeout."""
    store = torch_distributed.HashStore()
    with pytest.raises(StartStopped, match=r"^SIGTERM arrived while the ranks were meeting") as err:
        join(store, rank=rank, world_size=2, hostname="h", timeout_s=3600,
             host_of_rank=lambda r: None, stop=lambda: "SIGTERM")  # fmt: skip
    assert err.value.rank == rank
    assert exitcodes.for_error(StartStopped("x")) == exitcodes.PREEMPTED


@pytest.mark.parametrize(("rank", "lines"), [(0, 1), (1, 0)])
def test_a_start_stopped_is_one_line_from_rank_0(
    rank: int, lines: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """No error and no hint: a preemption, told once (as a trainer's preemption is)."""
    stopped = StartStopped("SIGTERM arrived while the ranks were meeting", rank=rank)
    assert exitcodes.tell(stopped) == exitcodes.PREEMPTED
    err = capsys.readouterr().err
    assert (
        err.splitlines()
        == ["ddpimg: SIGTERM arrived while the ranks were meeting; exit status 75"][:lines]
    )


def test_a_client_waiting_for_rank_0s_store_hears_a_signal() -> None:
    """A rank whose rank 0 has not started yet waits in TCPStore's connect (torch's C++,
    deaf to Python's signal handlers) for up to --timeout: the wait looks at ``stop``."""
    port = free_port()
    began = time.monotonic()
    with pytest.raises(StartStopped):
        open_store("127.0.0.1", port, 1, 3600, False, stop=lambda: "SIGUSR2")
    assert time.monotonic() - began < 30  # a hang guard: the poll is 0.5 s
