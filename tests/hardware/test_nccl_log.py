"""NCCL's INIT/NET log, read: one excerpt per transport and per failure. The excerpts follow
the formats NCCL and the aws-ofi-nccl plugin print with NCCL_DEBUG=INFO,
NCCL_DEBUG_SUBSYS=INIT,NET."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.hardware.nccl_log import (
    NcclNetwork,
    TransportCheck,
    debug_env,
    diagnose,
    parse,
    summary,
)

P = "g001:1234:1234 [0] NCCL INFO "
IB = f"""\
{P}NCCL_SOCKET_IFNAME set by environment to ib0
{P}NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.
{P}NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.1.0.1<0>
{P}NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
{P}Using network IB
{P}Channel 00/0 : 0[0] -> 4[0] [send] via NET/IB/0/GDRDMA
"""
IB_NO_PEERMEM = f"""\
{P}NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.0.1<0>
{P}NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)
{P}Using network IB
{P}Channel 00/0 : 0[0] -> 4[0] [send] via NET/IB/0
"""
SOCKET_NO_IB = f"""\
{P}NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.
{P}NET/IB : No device found.
{P}NET/Socket : Using [0]eth0:10.0.0.1<0>
{P}Using network Socket
"""
OFI = f"""\
{P}NET/Plugin: Loaded net plugin AWS Libfabric (v8)
{P}NET/OFI Initializing aws-ofi-nccl 1.14.0
{P}NET/OFI Selected provider is cxi, fabric is cxi (found 4 nics)
{P}Using network AWS Libfabric
"""
OFI_PLUGIN_MISSING = f"""\
{P}NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open \
shared object file: No such file or directory
{P}NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
{P}NET/Socket : Using [0]hsn0:10.100.0.1<0> [1]hsn1:10.100.0.2<0>
{P}Using network Socket
"""
FORCED_MISSING = """\
g001:1234:1234 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.
g001:1234:1234 [0] init.cc:200 NCCL WARN Error: network AWS Libfabric not found.
"""
SHM = """\
g001:1234:1234 [3] misc/shmutils.cc:87 NCCL WARN Error: failed to extend \
/dev/shm/nccl-AbCdEf to 9637892 bytes
"""


def check(expected: str, nodes: int = 2, busbw: float = 20.0, floor: float = 0.0) -> TransportCheck:
    return TransportCheck(expected, "site", nodes, 4, busbw, floor, 0.06)


@pytest.mark.parametrize(
    ("text", "network", "transport", "gdr"),
    [
        (IB, "IB", "ib", True),
        (IB_NO_PEERMEM, "IB", "ib", False),
        (SOCKET_NO_IB, "Socket", "socket", None),
        (OFI, "AWS Libfabric", "ofi", None),
        (OFI_PLUGIN_MISSING, "Socket", "socket", None),
        ("", "", "", None),
    ],
)
def test_parse_transport(text: str, network: str, transport: str, gdr: bool | None) -> None:
    found = parse(text)
    assert (found.network, found.transport, found.gdr) == (network, transport, gdr)


def test_an_older_nccl_without_using_network_line() -> None:
    found = parse(f"{P}NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.0.1<0>\n")
    assert found.transport == "ib"


def test_expected_transports_pass() -> None:
    assert diagnose(parse(IB), check("ib")) == []
    assert diagnose(parse(OFI), check("ofi")) == []
    assert diagnose(parse(SOCKET_NO_IB), check("socket")) == []
    assert diagnose(parse(IB), check("socket")) == []  # faster than expected is fine


def test_fell_back_to_sockets_without_ib_device() -> None:
    (problem,) = diagnose(parse(SOCKET_NO_IB), check("ib"))
    assert problem.startswith("NCCL uses Socket, site site expects ib: fell back to sockets: ")
    assert "no InfiniBand device visible in the container" in problem


def test_plugin_not_found() -> None:
    (problem,) = diagnose(parse(OFI_PLUGIN_MISSING), check("ofi"))
    assert "fell back to sockets: plugin not found: the aws-ofi-nccl" in problem
    assert parse(OFI_PLUGIN_MISSING).plugin_missing


def test_forced_network_missing() -> None:
    problems = diagnose(parse(FORCED_MISSING), check("ofi"))
    assert problems[0].startswith("NCCL_NET names network 'AWS Libfabric', which NCCL could")


def test_nvidia_peermem_not_loaded() -> None:
    (problem,) = diagnose(parse(IB_NO_PEERMEM), check("ib"))
    assert problem.startswith("GPU Direct RDMA disabled: nvidia_peermem not loaded")


def test_dev_shm_too_small() -> None:
    problems = diagnose(parse(SHM), check("ib", nodes=1))
    assert len(problems) == 1
    assert problems[0].startswith("/dev/shm too small for 4 local ranks (0.06 GiB; NCCL: ")
    assert "--shm-size, at least 0.5 GiB" in problems[0]


def test_bandwidth_floor_only_across_nodes() -> None:
    (problem,) = diagnose(parse(IB), check("ib", busbw=1.5, floor=3))
    assert problem == (
        "all-reduce bus bandwidth 1.50 GB/s is below site site's fabric.min_busbw_gbps 3"
    )
    assert diagnose(parse(SOCKET_NO_IB), check("ib", nodes=1, busbw=0.1, floor=3)) == []


def test_summary_and_debug_env(tmp_path: Path) -> None:
    assert summary(parse(IB), "ib") == (
        "NCCL network: IB (transport ib, expected ib); GPU Direct RDMA on"
    )
    assert summary(NcclNetwork(), "") == (
        "NCCL network: not reported (transport -, expected -); GPU Direct RDMA not reported"
    )
    env = debug_env(str(tmp_path / "r0.log"))
    assert env == {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": str(tmp_path / "r0.log"),
    }
