"""Servers on loopback for the sync and failure tests: a real MLflow tracking server (the
tests cut the link to it with tests/forwarder.py), and a recorder that answers every HTTP
request 401 (where W&B's sync would find its server) and remembers the paths it was asked
for."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.trackers.offline import OFFLINE_ENV

# `mlflow server` took 51 s to answer /health on this 2-core machine under load (17 s idle);
# the wait is a hang guard of about 5 times that.
SERVER_START_S = 240
# MLflow's job runner (GenAI evaluation jobs, on by default) is no part of tracking: it
# starts huey consumers that cost about 17 CPU-seconds at each server start and 0.17 a second
# after (this 2-core machine, 2026-11-27), and leaves a directory in /dev/shm at every start.
NO_JOB_RUNNER = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def mlflow_server(root: Path, env: dict[str, str]) -> Iterator[str]:
    """A real MLflow tracking server on 127.0.0.1 (SQLite store, artifacts under ``root``);
    yields its URI."""
    port = free_port()
    root.mkdir(parents=True, exist_ok=True)
    log = (root / "server.log").open("w")
    server = [
        sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
        "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
        "--artifacts-destination", str(root / "artifacts"), "--workers", "1",
    ]  # fmt: skip
    proc = subprocess.Popen(
        server,
        env=env | OFFLINE_ENV | NO_JOB_RUNNER,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"mlflow server did not answer within {SERVER_START_S} s (hang guard; "
                        f"exit {proc.poll()}): {(root / 'server.log').read_text()[-3000:]}"
                    ) from None
                time.sleep(0.5)
        yield uri
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class RefusingServer:
    """An HTTP server on 127.0.0.1 answering every request 401, recording its paths."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        paths = self.paths

        class Handler(http.server.BaseHTTPRequestHandler):
            def _refuse(self) -> None:
                paths.append(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = _refuse

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
