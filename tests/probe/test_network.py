"""The probe's TCP exchange (ddpimg.probe.network), its meeting through files
(ddpimg.probe.meeting) and what it reads of this node (ddpimg.probe.node), on loopback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.probe.meeting import Meeting
from ddpimg.probe.network import PAYLOAD_BYTES, REACHED, EchoServer, Target, attempt, exchange
from ddpimg.probe.node import fstype_of, interfaces, ipv4_address, local_dirs


def test_an_exchange_with_the_echo_server_reaches_it() -> None:
    server = EchoServer("job.0").start()
    try:
        found = attempt("me", Target("peer", server.port, "job.0"), "{node}", "localhost")
        assert (found.address, found.outcome) == ("127.0.0.1", REACHED)
        assert found.mbytes_per_s > 0
        assert found.seconds > 0
        # Another probe's token gets no answer: a stray server is not taken for the peer's.
        outcome, _, _ = exchange("127.0.0.1", server.port, "job.1")
        assert outcome.startswith("failed: ")
    finally:
        server.stop()


def test_a_closed_port_and_an_unknown_name_say_why() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused
        closed = attempt("me", Target("peer", port, "t"), "interface:lo", "127.0.0.1")
    assert closed.outcome.startswith("failed: ")
    assert "refused" in closed.outcome
    unknown = attempt("me", Target("peer", 1, "t"), "{node}i", "no-such-host.invalid")
    assert (unknown.address, unknown.outcome) == ("", "does not resolve")
    assert PAYLOAD_BYTES >= 1 << 20  # enough bytes that a rate means something


def test_a_meeting_gathers_every_task_or_names_the_missing(tmp_path: Path) -> None:
    first = Meeting(tmp_path, 0, 2, timeout_s=0.5)
    second = Meeting(tmp_path, 1, 2, timeout_s=0.5)
    first.post("facts", {"n": 0})
    with pytest.raises(DdpimgError, match=r"tasks 1 posted no facts to .* within 0.5 s"):
        first.gather("facts")
    second.post("facts", {"n": 1})
    assert first.gather("facts") == [{"n": 0}, {"n": 1}]


def test_this_nodes_loopback_and_memory_backed_space() -> None:
    assert ipv4_address("lo") == "127.0.0.1"
    assert any(i.name == "lo" and i.kind == "loopback" for i in interfaces())
    mounts = [("/", "ext4"), ("/dev/shm", "tmpfs"), ("/dev", "devtmpfs")]
    assert fstype_of("/dev/shm/x", mounts) == "tmpfs"
    assert fstype_of("/dev/null", mounts) == "devtmpfs"
    assert fstype_of("/tmp", mounts) == "ext4"
    shm = [d for d in local_dirs({}) if d.path == "/dev/shm"]
    assert shm
    assert shm[0].ram
