"""Network interfaces of this host, read from the kernel (no `hostname -I`, no subprocess)."""

from __future__ import annotations

import fcntl
import socket
import struct
from pathlib import Path

_SIOCGIFADDR = 0x8915


def interface_names() -> list[str]:
    """Names of the interfaces this host has (``/sys/class/net``)."""
    try:
        return sorted(p.name for p in Path("/sys/class/net").iterdir())
    except OSError:
        return sorted(name for _, name in socket.if_nameindex())


def ipv4_address(interface: str) -> str | None:
    """The IPv4 address of ``interface``, or None when it has none (or does not exist)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(
                sock.fileno(), _SIOCGIFADDR, struct.pack("256s", interface.encode()[:15])
            )
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def missing_interfaces(wanted: tuple[str, ...]) -> list[str]:
    """The interfaces of ``wanted`` that this host lacks (Gloo needs every listed one)."""
    present = set(interface_names())
    return [name for name in wanted if name not in present]
