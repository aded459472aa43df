"""What one node has: its network interfaces (name, kind, IPv4 address), candidate node-local
directories (file system, free space, whether it is memory), its GPUs and CPU architecture.
Read from /sys, /proc and ``nvidia-smi`` where present; every read is bounded."""

from __future__ import annotations

import fcntl
import os
import platform
import shutil
import socket
import struct
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SIOCGIFADDR = 0x8915
IFNAMSIZ = 16
NVIDIA_SMI_TIMEOUT_S = 30.0
# /sys/class/net/NAME/type (ARPHRD_*): what kind of link an interface is.
LINK_KINDS = {1: "ethernet", 32: "infiniband", 772: "loopback"}
RAM_FILE_SYSTEMS = ("tmpfs", "ramfs")
NETWORK_FILE_SYSTEMS = (
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "cifs", "smb3", "pvfs2", "orangefs",
    "wekafs", "fuse.sshfs", "dvs",
)  # fmt: skip
# Where sites put node-local space: the job's variables first, then the usual paths.
LOCAL_DIR_VARIABLES = ("TMPDIR", "LOCAL_SCRATCH", "SLURM_TMPDIR")
LOCAL_DIR_PATHS = ("/local_scratch", "/localscratch", "/lscratch", "/scratch/local", "/tmp",
                   "/dev/shm")  # fmt: skip


@dataclass(frozen=True)
class Interface:
    name: str
    kind: str  # ethernet, infiniband, loopback, or "type N"
    address: str  # IPv4, "" when none
    up: bool


@dataclass(frozen=True)
class LocalDir:
    path: str
    how: str  # "$TMPDIR" or the path itself
    fstype: str
    free_bytes: int

    @property
    def ram(self) -> bool:
        return self.fstype in RAM_FILE_SYSTEMS

    @property
    def network(self) -> bool:
        return self.fstype in NETWORK_FILE_SYSTEMS or self.fstype.startswith("fuse.")


@dataclass(frozen=True)
class GpuFound:
    vendor: str  # nvidia, amd
    name: str
    count: int
    capability: str  # "9.0"; "" when unknown
    driver: str  # "580.65.06"; "" when unknown
    how: str


@dataclass(frozen=True)
class NodeFacts:
    node: str
    hostname: str
    fqdn: str
    machine: str  # platform.machine()
    interfaces: tuple[Interface, ...]
    local_dirs: tuple[LocalDir, ...]
    gpu: GpuFound | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeFacts:
        gpu = data.get("gpu")
        return cls(
            node=data["node"],
            hostname=data["hostname"],
            fqdn=data["fqdn"],
            machine=data["machine"],
            interfaces=tuple(Interface(**item) for item in data["interfaces"]),
            local_dirs=tuple(LocalDir(**item) for item in data["local_dirs"]),
            gpu=GpuFound(**gpu) if gpu else None,
        )


def ipv4_address(name: str) -> str:
    """The interface's IPv4 address (SIOCGIFADDR), "" when it has none."""
    request = struct.pack("256s", name.encode()[: IFNAMSIZ - 1])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            answer = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)
        except OSError:
            return ""
    return socket.inet_ntoa(answer[20:24])


def interfaces(sys_net: Path = Path("/sys/class/net")) -> list[Interface]:
    found = []
    for entry in sorted(sys_net.iterdir()) if sys_net.is_dir() else []:
        try:
            kind_number = int((entry / "type").read_text().strip())
            state = (entry / "operstate").read_text().strip()
        except (OSError, ValueError):
            continue
        kind = LINK_KINDS.get(kind_number, f"type {kind_number}")
        # Virtual links (veth, bridges) report "unknown" or "up"; only "down" is down.
        found.append(Interface(entry.name, kind, ipv4_address(entry.name), state != "down"))
    return found


def _mounts(mountinfo: Path = Path("/proc/self/mountinfo")) -> list[tuple[str, str]]:
    """(mount point, file system type), from /proc/self/mountinfo."""
    mounts = []
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) > 4 and right:
            mounts.append((fields[4].replace("\\040", " "), right.split()[0]))
    return mounts


def fstype_of(path: str, mounts: list[tuple[str, str]]) -> str:
    """The file system type of the mount holding ``path`` (the longest mount point)."""
    real = os.path.realpath(path)
    best, kind = "", "unknown"
    for point, fstype in mounts:
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fstype
    return kind


def local_dirs(env: Mapping[str, str]) -> list[LocalDir]:
    mounts = _mounts()
    seen: set[str] = set()
    found = []
    candidates = [(env[name], f"${name}") for name in LOCAL_DIR_VARIABLES if env.get(name)]
    candidates += [(path, path) for path in LOCAL_DIR_PATHS]
    for path, how in candidates:
        real = os.path.realpath(path)
        if real in seen or not os.path.isdir(path) or not os.access(path, os.W_OK):
            continue
        seen.add(real)
        free = shutil.disk_usage(path).free
        found.append(LocalDir(path, how, fstype_of(path, mounts), free))
    return found


def nvidia_gpus(env: Mapping[str, str]) -> GpuFound | None:
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if smi is None:
        return None
    query = ["--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]
    try:
        proc = subprocess.run(
            [smi, *query], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    rows = [line.split(", ") for line in proc.stdout.splitlines() if line.count(", ") == 2]
    if proc.returncode != 0 or not rows:
        return None
    name, capability, driver = rows[0]
    return GpuFound("nvidia", name, len(rows), capability, driver, "nvidia-smi")


def amd_gpus(dev: Path = Path("/dev")) -> GpuFound | None:
    if not (dev / "kfd").exists():
        return None
    count = len(list((dev / "dri").glob("renderD*"))) if (dev / "dri").is_dir() else 0
    return GpuFound("amd", "AMD GPU", count, "", "", "/dev/kfd (ROCm's device)")


def node_facts(env: Mapping[str, str]) -> NodeFacts:
    hostname = socket.gethostname()
    node = env.get("SLURMD_NODENAME") or hostname.split(".")[0]
    return NodeFacts(
        node=node,
        hostname=hostname,
        fqdn=socket.getfqdn(node),
        machine=platform.machine(),
        interfaces=tuple(interfaces()),
        local_dirs=tuple(local_dirs(env)),
        gpu=nvidia_gpus(env) or amd_gpus(),
    )
