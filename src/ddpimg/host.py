"""This machine's identity, read from the system: kept out of the pure resolution modules
(``ddpimg.plan`` and below take the host name as an argument)."""

from __future__ import annotations

import os


def short_hostname() -> str:
    """This machine's short host name (``hostname -s``): profile auto-selection, the
    master-address rules and the names in messages."""
    return os.uname().nodename.split(".")[0]
