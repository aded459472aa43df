"""Which network NCCL chose, read from its own INIT/NET debug output, and what a wrong choice
means, in words. Pure: ``ddpimg doctor`` sets the variables (:func:`debug_env`) before the
process group exists, runs its all-reduce, and hands the rank's log to :func:`parse` and
:func:`diagnose`.

The lines recognised are those NCCL writes with ``NCCL_DEBUG=INFO`` and
``NCCL_DEBUG_SUBSYS=INIT,NET`` (formats from NCCL's source, ``src/transport/net_ib.cc``,
``net_socket.cc``, ``plugin/net.cc``, ``init.cc``, and the aws-ofi-nccl plugin):

- ``NET/IB : Using [0]mlx5_0:1/IB ...`` / ``NET/Socket : Using [0]eth0:10.0.0.1<0>``:
  the devices of a transport NCCL initialised;
- ``Using network IB`` / ``Using network Socket`` / ``Using network AWS Libfabric``: the
  one it uses;
- ``NET/OFI ...`` lines, ``NET/Plugin: Loaded net plugin AWS Libfabric``: the OFI plugin;
- ``NET/Plugin: Could not find: libnccl-net.so``, ``NET/Plugin : No plugin found``,
  ``Failed to open libnccl-net.so``, ``Plugin load ... returned``: no plugin was loaded;
- ``NET/IB : GPU Direct RDMA Enabled/Disabled for HCA ...``, ``via NET/IB/0/GDRDMA``:
  GPUDirect RDMA; ``(no module)``: the nvidia_peermem kernel module is not loaded;
- ``NET/IB : No device found.``: no InfiniBand device visible;
- a WARN naming ``/dev/shm``: a shared-memory segment could not be made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# What NCCL needs in /dev/shm per local rank is a few buffers of NCCL_BUFFSIZE (4 MiB) per
# channel and peer; a container's default 64 MiB is known to fail with 4 or more ranks.
SHM_GIB_PER_LOCAL_RANK = 0.125

_USING_NETWORK = re.compile(r"Using network (.+?)\s*$")
_NET_USING = re.compile(r"NET/(IB|Socket)\s*: Using (.*)")
_GDR = re.compile(r"GPU Direct RDMA (Enabled|Disabled)( for HCA [^(]*)?(\(no module\))?")
_PLUGIN_MISSING = (
    "NET/Plugin: Could not find",
    "NET/Plugin : No plugin found",
    "Failed to open libnccl-net",
    "Plugin load returned",
    "Plugin load (",
)
_NOT_FOUND = re.compile(r"network (.+?) not found")


def transport_of(network: str) -> str:
    """``ib``, ``socket`` or ``ofi`` for a name NCCL gives its network."""
    lowered = network.lower()
    if "libfabric" in lowered or "ofi" in lowered:
        return "ofi"
    if lowered.startswith("ib"):
        return "ib"
    if lowered.startswith("socket"):
        return "socket"
    return lowered


@dataclass(frozen=True)
class NcclNetwork:
    """What one rank's log says."""

    network: str = ""  # as NCCL names it: IB, Socket, AWS Libfabric, ...
    transport: str = ""  # ib / ofi / socket, "" when the log says nothing
    gdr: bool | None = None  # GPUDirect RDMA, None when not reported
    gdr_no_module: bool = False
    plugin_missing: bool = False
    no_ib_device: bool = False
    shm_errors: tuple[str, ...] = ()
    forced_missing: str = ""  # NCCL_NET named a network NCCL could not find
    lines: int = field(default=0, compare=False)


def parse(text: str) -> NcclNetwork:
    """The network facts in one rank's NCCL debug output."""
    network = ""
    initialised = ""
    gdr: bool | None = None
    gdr_no_module = plugin_missing = no_ib = ofi_seen = False
    shm: list[str] = []
    forced = ""
    lines = text.splitlines()
    for line in lines:
        if match := _USING_NETWORK.search(line):
            network = match[1]
        elif match := _NET_USING.search(line):
            initialised = initialised or match[1]
        if "NET/OFI" in line or ("Loaded net plugin" in line and "Libfabric" in line):
            ofi_seen = True
        if any(marker in line for marker in _PLUGIN_MISSING):
            plugin_missing = True
        if "NET/IB : No device found" in line or "NET/IB: No device found" in line:
            no_ib = True
        if match := _GDR.search(line):
            if match[1] == "Enabled":
                gdr = True
            elif gdr is None:
                gdr = False
            gdr_no_module = gdr_no_module or bool(match[3])
        if "/GDRDMA" in line:
            gdr = True
        if "WARN" in line and "/dev/shm" in line:
            shm.append(line.strip())
        if "WARN" in line and (match := _NOT_FOUND.search(line)):
            forced = match[1]
    if not network and ofi_seen and not plugin_missing:
        network = "AWS Libfabric"
    network = network or initialised
    return NcclNetwork(
        network=network,
        transport=transport_of(network) if network else "",
        gdr=gdr,
        gdr_no_module=gdr_no_module,
        plugin_missing=plugin_missing,
        no_ib_device=no_ib,
        shm_errors=tuple(shm),
        forced_missing=forced,
        lines=len(lines),
    )


def debug_env(log_file: str) -> dict[str, str]:
    """What makes NCCL write its INIT and NET decisions to ``log_file``."""
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_DEBUG_FILE": log_file}


@dataclass(frozen=True)
class TransportCheck:
    """What ``ddpimg doctor`` needs besides the log."""

    expected: str  # the profile's fabric.transport
    site: str
    num_nodes: int
    local_world_size: int
    busbw_gbps: float
    min_busbw_gbps: float
    shm_gib: float


def diagnose(found: NcclNetwork, check: TransportCheck) -> list[str]:
    """The problems, each with its cause in words; empty when the transport is as expected.
    Transport and bandwidth are judged only across nodes: within one node NCCL uses NVLink,
    PCIe and shared memory whatever the network."""
    problems: list[str] = []
    for line in found.shm_errors[:1]:
        need = SHM_GIB_PER_LOCAL_RANK * check.local_world_size
        problems.append(
            f"/dev/shm too small for {check.local_world_size} local ranks "
            f"({check.shm_gib:.2f} GiB; NCCL: {line}): give the container more shared memory "
            f"(docker --shm-size, at least {need:g} GiB; apptainer binds the host's /dev/shm)"
        )
    if found.forced_missing:
        problems.append(
            f"NCCL_NET names network '{found.forced_missing}', which NCCL could not find: "
            "plugin not found (bind it with fabric.binds, put its directory on "
            "fabric.library_paths)"
        )
    multi_node = check.num_nodes > 1
    expected = check.expected
    if multi_node and expected in ("ib", "ofi") and found.transport != expected:
        what = found.network or "no network reported (is NCCL_DEBUG overridden?)"
        if expected == "ofi" and (found.plugin_missing or found.transport != "ofi"):
            cause = (
                "plugin not found: the aws-ofi-nccl / aws-ofi-rccl library (libnccl-net.so) did "
                "not load; check fabric.binds and fabric.library_paths"
            )
        elif found.no_ib_device:
            cause = (
                "no InfiniBand device visible in the container (bind /dev/infiniband, or check "
                "NCCL_IB_HCA)"
            )
        else:
            cause = "NCCL did not take the fabric (check NCCL_IB_DISABLE / NCCL_NET)"
        fell = "fell back to sockets: " if found.transport == "socket" else ""
        problems.append(f"NCCL uses {what}, site {check.site} expects {expected}: {fell}{cause}")
    ib_used = multi_node and expected == "ib" and found.transport == "ib"
    if ib_used and found.gdr is False and found.gdr_no_module:
        problems.append(
            "GPU Direct RDMA disabled: nvidia_peermem not loaded on this node (NCCL: no "
            "module); traffic is staged through host memory"
        )
    if multi_node and check.min_busbw_gbps and check.busbw_gbps < check.min_busbw_gbps:
        cause = " (fell back to sockets)" if found.transport == "socket" else ""
        problems.append(
            f"all-reduce bus bandwidth {check.busbw_gbps:.2f} GB/s is below site "
            f"{check.site}'s fabric.min_busbw_gbps {check.min_busbw_gbps:g}{cause}"
        )
    return problems


def summary(found: NcclNetwork, expected: str) -> str:
    """One line for the doctor's output."""
    gdr = {True: "on", False: "off", None: "not reported"}[found.gdr]
    return (
        f"NCCL network: {found.network or 'not reported'} (transport "
        f"{found.transport or '-'}, expected {expected or '-'}); GPU Direct RDMA {gdr}"
    )
