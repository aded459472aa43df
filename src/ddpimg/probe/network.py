"""Which address of another node a task reaches, measured: a short TCP exchange with the
probing task on that node (an echo server each task runs), bounded in time.

The exchange sends a header naming the probe's token and a payload of
:data:`PAYLOAD_BYTES`, and waits for the server's answer; a packet filter that drops the
traffic (a blocked Ethernet between compute nodes) makes the connection time out instead.
Names are resolved the way the training's rendezvous resolves them (``getaddrinfo``), in a
thread bounded by :data:`RESOLVE_TIMEOUT_S`.
"""

from __future__ import annotations

import concurrent.futures
import socket
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

PAYLOAD_BYTES = 4 << 20
CONNECT_TIMEOUT_S = 3.0
EXCHANGE_TIMEOUT_S = 20.0
RESOLVE_TIMEOUT_S = 5.0
ACCEPT_POLL_S = 0.5
REACHED = "reached"
_HEADER = b"ddpimg-probe"
_CHUNK = 1 << 16


@dataclass(frozen=True)
class Attempt:
    """One try to reach a peer: ``form`` is the host-name rule (``{node}``, ``{node}i``,
    ``{node}.DOMAIN``) or ``interface:NAME`` (that interface's address); ``host`` what was
    resolved; ``address`` the IPv4 it resolved to; ``outcome`` ``reached`` or why not."""

    prober: str  # the node that tried
    peer: str  # the node it tried to reach
    form: str
    host: str
    address: str
    outcome: str
    seconds: float
    mbytes_per_s: float

    @property
    def reached(self) -> bool:
        return self.outcome == REACHED

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class EchoServer:
    """Answers probe exchanges on every address of this node until stopped."""

    def __init__(self, token: str) -> None:
        self.token = token.encode()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("0.0.0.0", 0))  # every interface: the probe is what chooses
        self._sock.listen(16)
        self._sock.settimeout(ACCEPT_POLL_S)
        self.port: int = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> EchoServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=ACCEPT_POLL_S * 4)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(EXCHANGE_TIMEOUT_S)
            try:
                header = _read_line(conn)
                name, token, length = header.split()
                if name != _HEADER or token != self.token:
                    return
                left = int(length)
                while left > 0:
                    chunk = conn.recv(min(_CHUNK, left))
                    if not chunk:
                        return
                    left -= len(chunk)
                conn.sendall(b"ok " + length + b"\n")
            except (OSError, ValueError):
                return


def _read_line(conn: socket.socket, limit: int = 256) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        byte = conn.recv(1)
        if not byte or len(line) > limit:
            raise ValueError("no header")
        line += byte
    return line.strip()


def resolve(host: str) -> str:
    """``host``'s IPv4 address as getaddrinfo gives it first, "" when it does not resolve
    within RESOLVE_TIMEOUT_S."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(socket.getaddrinfo, host, None, socket.AF_INET, socket.SOCK_STREAM)
    try:
        infos = future.result(timeout=RESOLVE_TIMEOUT_S)
    except (concurrent.futures.TimeoutError, OSError):
        return ""
    finally:
        pool.shutdown(wait=False)
    return str(infos[0][4][0]) if infos else ""


def exchange(address: str, port: int, token: str) -> tuple[str, float, float]:
    """(outcome, seconds, MB/s) of one exchange with the echo server at ``address:port``."""
    start = time.monotonic()
    payload = b"\0" * _CHUNK
    try:
        with socket.create_connection((address, port), timeout=CONNECT_TIMEOUT_S) as conn:
            conn.settimeout(EXCHANGE_TIMEOUT_S)
            conn.sendall(b"%s %s %d\n" % (_HEADER, token.encode(), PAYLOAD_BYTES))
            for _ in range(PAYLOAD_BYTES // _CHUNK):
                conn.sendall(payload)
            answer = _read_line(conn)
    except TimeoutError:
        return f"timed out after {time.monotonic() - start:.1f} s", time.monotonic() - start, 0.0
    except (OSError, ValueError) as err:
        return f"failed: {err}", time.monotonic() - start, 0.0
    seconds = time.monotonic() - start
    if answer != b"ok %d" % PAYLOAD_BYTES:
        return f"unexpected answer {answer!r}", seconds, 0.0
    return REACHED, seconds, PAYLOAD_BYTES / 1e6 / max(seconds, 1e-6)


@dataclass(frozen=True)
class Target:
    """A peer's echo server: its node, port and the probe's token."""

    node: str
    port: int
    token: str


def attempt(prober: str, target: Target, form: str, host: str) -> Attempt:
    """Resolve ``host`` (an address resolves to itself) and exchange with ``target`` there."""
    address = resolve(host)
    if not address:
        return Attempt(prober, target.node, form, host, "", "does not resolve", 0.0, 0.0)
    outcome, seconds, rate = exchange(address, target.port, target.token)
    return Attempt(prober, target.node, form, host, address, outcome, seconds, rate)
