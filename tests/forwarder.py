"""A TCP forwarder on loopback between a client and its server, which a test can break in
the two ways a link breaks:

- ``cut()`` closes the listener and every connection: to the client, its server is gone
  (the tracker tests: an MLflow server lost mid-run).
- ``freeze()`` keeps every connection open and passes nothing on, either way: the client
  waits on a server that never answers again, as it does on a stopped, frozen or cut-off
  host (the stall watch's tests: rank 0's store). A test could SIGSTOP the server's process
  instead, but any SIGCONT to its process group would continue it (the kernel sends one to a
  group that becomes orphaned while it has a stopped member, and a test's group is the whole
  test command's); a stopped store that answered again failed a CI run. The freeze is this
  process's own state, which no signal undoes.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class Forwarder:
    """127.0.0.1:port -> target_port, until ``cut()`` or ``freeze()``."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = False
        self._frozen = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                if self._cut:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                if not self._frozen.is_set():  # frozen: taken, never passed on
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def freeze(self) -> None:
        """From now on nothing passes, either way (what is in flight is dropped)."""
        self._frozen.set()

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            sockets, self._sockets = self._sockets, []
        self.listener.close()
        for end in sockets:
            end.close()
