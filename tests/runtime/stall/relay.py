"""A TCP relay between a store's clients and its server that can be frozen: from then on it
takes what either side sends and passes nothing on, so the clients hold an open connection
that never answers again, which is what a stopped, frozen or cut-off store host looks like
to them.

Why not SIGSTOP the server's process: a stopped process is continued by any SIGCONT its
process group receives (the kernel sends one to a group that becomes orphaned while it has a
stopped member), and in CI the test shares its group with everything else the test command
runs. A store that answered after its "stop" failed test_watch's test in a run of the test
command beside the neighbour (2026-11-29); the relay's freeze is this process's own state,
which nothing outside can undo.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

# How long a pump waits on a socket before looking at the closed flag again: bounds close().
POLL_S = 0.2


class FreezableRelay:
    """Listens on 127.0.0.1 (a port the kernel chose: ``port``) and relays each connection to
    ``upstream_port`` on 127.0.0.1, both ways, until :meth:`freeze`."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._frozen = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, name="relay-accept", daemon=True)]
        self._threads[0].start()

    def freeze(self) -> None:
        """From now on nothing passes, either way (what is in flight is dropped)."""
        self._frozen.set()

    def close(self) -> None:
        self._closed.set()
        for thread in self._threads:
            thread.join(timeout=5 * POLL_S)
        for sock in [self._listener, *self._sockets]:
            sock.close()

    def __enter__(self) -> FreezableRelay:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            for sock in (client, server):
                sock.settimeout(POLL_S)
                self._sockets.append(sock)
            for source, sink in ((client, server), (server, client)):
                pump = threading.Thread(
                    target=self._pump, args=(source, sink), name="relay-pump", daemon=True
                )
                self._threads.append(pump)
                pump.start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                data = source.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)
                return
            if not self._frozen.is_set():
                try:
                    sink.sendall(data)
                except OSError:
                    return
