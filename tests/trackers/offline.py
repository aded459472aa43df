"""What keeps tracker tests on this machine: the variables that make W&B and MLflow work
offline and silent (no telemetry, no error reports, no retries against a server that is
gone), and a guard that refuses, inside the test process, any connection that would leave
the loopback range."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest

OFFLINE_ENV = {
    "WANDB_MODE": "offline",
    "WANDB_ERROR_REPORTING": "false",
    "WANDB_SILENT": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}


def _loopback(address: Any) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline variables set, and every IP connection of this process refused unless
    its address is a loopback one (Unix sockets pass: W&B talks to its service by one)."""
    for name, value in OFFLINE_ENV.items():
        monkeypatch.setenv(name, value)
    connect = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address):
            raise ConnectionRefusedError(f"test guard: {address!r} is not a loopback address")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
