from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ddpimg import exitcodes
from ddpimg.errors import RendezvousError
from ddpimg.runtime.watchdog import collectives_stalled, deadline

EXPIRING = """
import time
from ddpimg.errors import RendezvousError
from ddpimg.runtime.watchdog import deadline
with deadline(0.5, lambda: RendezvousError("init_process_group stalled")):
    time.sleep(30)
print("not reached")
"""


def test_a_block_left_in_time_is_not_ended() -> None:
    with deadline(0.2, lambda: RendezvousError("never")):
        pass
    time.sleep(0.4)  # the cancelled timer must not fire afterwards (it would end pytest)


def test_the_deadline_ends_a_blocked_process_with_status_3() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", EXPIRING], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == exitcodes.RENDEZVOUS_FAILED
    assert proc.stderr == "ddpimg: error: init_process_group stalled\n"
    assert "not reached" not in proc.stdout  # ended by the deadline, not after the sleep


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"GLOO_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "ib0"},
         "GLOO_SOCKET_IFNAME=ib0, NCCL_SOCKET_IFNAME=ib0"),
        ({"NCCL_SOCKET_IFNAME": "hsn0"}, "NCCL_SOCKET_IFNAME=hsn0"),
        ({}, "no GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME set: the host name's interface"),
    ],
)  # fmt: skip
def test_stall_message_names_the_interfaces_in_use(env: dict[str, str], named: str) -> None:
    message = str(collectives_stalled("gloo", 15, 1, env))
    assert message.startswith(
        "rank 1: every rank joined the rendezvous, but init_process_group (gloo) did not "
        f"finish within 15 s: the ranks' own connections do not reach each other ({named})\n"
    )
    assert "hint: name the fabric interface in the site profile's network.interfaces" in message
