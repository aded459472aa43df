"""A multi-node Slurm cluster on one machine: every node is a set of Linux namespaces.

``NamespaceCluster(workdir, num_nodes)`` builds N "nodes" ``node1``..``nodeN``. Each node is
a network namespace with two interfaces, a UTS namespace with its own hostname and a mount
namespace with its own ``/sys`` and ``/etc/hosts``; one real ``slurmd`` runs in each, one
``slurmctld`` and ``munged`` in the root namespace (``LocalSlurm`` with a node list). It
reproduces the network of the clusters the origin tutorials fight with:

- ``eth0`` (management, 10.77.M.0/24) carries Slurm's own traffic. A packet filter
  (nftables, in each node) drops every other connection arriving on ``eth0``: only the
  slurmd port and srun's ports (``SrunPortRange``) are open. Like the blocked Ethernet of
  CSC's Puhti and Mahti, it is the first address ``hostname -I`` prints.
- ``ib0`` (fabric, 10.77.M+1.0/24) is open between nodes, like InfiniBand.
- A login node on demand (``start_login_node``): a namespace of its own on the management
  network only, at 10.77.M.5, running no slurmd; Slurm's commands there reach slurmctld at
  the head's address (``tests/engines/sshd.py`` runs OpenSSH's sshd in it).
- Names (the node's ``/etc/hosts``): ``nodeNi`` always resolves to ``ib0`` (JSC's suffix);
  the short name ``nodeN`` resolves to ``ib0`` (CSC: ``hostname -s`` works) or, after
  ``resolve_short_names_to("eth0")``, to ``eth0`` (JSC: the plain name is the wrong
  network).

Layout, and why:

- The two bridges (``br-mgmt``, ``br-fab``) live in a "switch" namespace of their own, not in
  the root namespace: with ``br_netfilter`` loaded (it is here, and Docker loads it),
  bridged frames would pass the root namespace's iptables FORWARD chain, which Docker sets to
  DROP. The root namespace gets one veth, the head node's management address 10.77.M.1
  (slurmctld, srun), and no route anywhere else is added: traffic stays on loopback and on
  these namespaces' addresses.
- A node's namespaces are held by a "holder" process (``sleep infinity``) and entered with
  ``nsenter -t HOLDER --net --uts --mount`` (``on_node``); slurmd is started that way, so
  its tasks are on the node, and so is Open MPI's ``orted`` by ``rsh_agent`` (``mpirun
  --mca plm_rsh_agent``). ``/sys`` is mounted afresh in the node (so ``/sys/class/net``
  lists the node's own interfaces, as on a real machine) with the host's cgroup tree moved
  back under it (slurmd refuses to start without ``/sys/fs/cgroup``; ``ip netns exec``
  remounts ``/sys`` without it, which is why it is not used). ``/etc/hosts`` is a bind mount
  of one file under ``workdir``, so the machine's own ``/etc/hosts`` is never edited.
  ``/dev/shm`` is the node's own; the rest of the file system (``/tmp``, the checkout) is
  shared, like a cluster's shared file system.
- Names of namespaces and links carry a random token; the management subnet is chosen
  under a lock among those not in use. A registry file per cluster under
  ``/run/ddpimg-netns`` records what was created and by which process: ``start()`` first
  removes what clusters of dead processes left behind (a run killed with SIGKILL), and
  ``stop()`` removes exactly what this one created. Holders and daemons get a parent-death
  signal, so they die with the test process.
- Every wait is bounded; ``start`` and ``stop`` are safe to call again, and ``start``
  cleans up after itself when it fails.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from tests.engines.slurm import DeclaredHardware, LocalSlurm, SlurmNode

NETNS_DIR = Path("/run/netns")
REGISTRY_DIR = Path("/run/ddpimg-netns")
SUBNET_POOL = ipaddress.ip_network("10.77.0.0/16")
SLURMD_PORT = 6818
# Above Linux's ephemeral range (32768-60999), so srun's ports never meet a kernel-chosen one.
SRUN_PORT_RANGE = (61000, 61999)
FILTER_TABLE = "ddpimg_mgmt"
COMMAND_TIMEOUT_S = 30.0
LOGIN = "login"
LOGIN_HOST_OFFSET = 5  # 10.77.M.5: between the head (.1) and the nodes (.11, ...)
STOP_WAIT_S = 10.0
LOCK_WAIT_S = 60.0
_POLL_S = 0.1

Interface = Literal["ib0", "eth0"]

# Run by each node's holder, inside its fresh mount and UTS namespaces: $1 node name,
# $2 hosts file, $3 an empty directory to park the cgroup tree in while /sys is replaced.
_HOLDER_SCRIPT = """
set -eu
# IPv4 only, as the cluster's addresses and names are: no link-local IPv6 addresses for
# Gloo or MPI to pick up on an interface.
for knob in /proc/sys/net/ipv6/conf/*/disable_ipv6; do [ ! -e "$knob" ] || echo 1 >"$knob"; done
mount --rbind /sys/fs/cgroup "$3"
mount -t sysfs sysfs /sys
mount --move "$3" /sys/fs/cgroup
mount --bind "$2" /etc/hosts
mount -t tmpfs -o mode=1777 shm /dev/shm
hostname "$1"
echo ready
exec sleep infinity
"""


class NamespaceClusterError(RuntimeError):
    """The namespace cluster could not be built, used or removed."""


@dataclass(frozen=True)
class Node:
    """One namespace node: its name (also its hostname), namespace and addresses."""

    name: str
    netns: str
    mgmt_addr: str  # eth0: Slurm's traffic only
    fabric_addr: str  # ib0: open

    @property
    def suffix_name(self) -> str:
        """The JSC-style name, always on the fabric (``node1i``)."""
        return f"{self.name}i"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
    )
    if check and proc.returncode != 0:
        raise NamespaceClusterError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def _process_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks (tells a PID from a later reuse of it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _pids_in_netns(netns_file: Path) -> list[int]:
    """Processes whose network namespace is the one bound at ``netns_file``."""
    try:
        target = netns_file.stat().st_ino
    except OSError:
        return []
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "ns" / "net").stat().st_ino == target:
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _kill_and_wait(pids: Sequence[int], timeout_s: float) -> list[int]:
    """SIGKILL ``pids`` and wait until they are gone; returns those still there."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        alive = [pid for pid in alive if Path(f"/proc/{pid}").exists() and not _is_zombie(pid)]
    return alive


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@dataclass
class _Record:
    """What one cluster created, written to the registry before it is created."""

    token: str
    owner_pid: int
    owner_start: str
    mgmt_subnet: str
    namespaces: list[str]
    links: list[str]

    @property
    def path(self) -> Path:
        return REGISTRY_DIR / f"{self.token}.json"

    def save(self) -> None:
        REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.__dict__, indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> _Record | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def owner_alive(self) -> bool:
        return _process_start(self.owner_pid) == self.owner_start

    def remove_resources(self) -> list[str]:
        """Delete the namespaces (after killing what runs in them) and links; returns what
        could not be removed."""
        left: list[str] = []
        for name in self.namespaces:
            netns_file = NETNS_DIR / name
            if not netns_file.exists():
                continue
            alive = _kill_and_wait(_pids_in_netns(netns_file), STOP_WAIT_S)
            if alive:
                left.append(f"processes {alive} in namespace {name}")
            if _ip("netns", "delete", name, check=False).returncode != 0:
                left.append(f"namespace {name}")
        for link in self.links:
            if _ip("link", "show", link, check=False).returncode == 0:
                _ip("link", "delete", link, check=False)
                if _ip("link", "show", link, check=False).returncode == 0:
                    left.append(f"link {link}")
        return left


@contextlib.contextmanager
def _registry_lock(timeout_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Serialise subnet choice and sweeping between concurrent test runs (bounded wait)."""
    REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    with (REGISTRY_DIR / ".lock").open("w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NamespaceClusterError(
                        f"{REGISTRY_DIR / '.lock'} is still held after {timeout_s:g} s"
                    ) from None
                time.sleep(_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def sweep_stale() -> list[str]:
    """Remove what clusters of processes that no longer exist left behind; returns their
    tokens. Clusters of live processes (a concurrent test run) are left alone, and so is
    the record of anything that could not be removed, for the next sweep."""
    swept = []
    with _registry_lock():
        for path in sorted(REGISTRY_DIR.glob("*.json")):
            record = _Record.load(path)
            if record is None or record.owner_alive() or record.remove_resources():
                continue
            path.unlink(missing_ok=True)
            swept.append(record.token)
    return swept


def _subnets_in_use() -> set[ipaddress.IPv4Network]:
    used: set[ipaddress.IPv4Network] = set()
    listing = _ip("-4", "-o", "addr", "show").stdout
    for line in listing.splitlines():
        fields = line.split()
        if "inet" in fields:
            used.add(ipaddress.ip_interface(fields[fields.index("inet") + 1]).network)
    for path in REGISTRY_DIR.glob("*.json"):
        record = _Record.load(path)
        if record is not None:
            used.add(ipaddress.ip_network(record.mgmt_subnet))
    return used


class NamespaceCluster:
    """N namespace nodes running a real Slurm; see the module docstring.

    ``env`` holds the variables that make ``srun`` (run in the root namespace, the "login
    node") use this cluster; ``on_node`` builds a command line that runs on one node.
    """

    def __init__(
        self, workdir: Path, num_nodes: int = 2, hardware: DeclaredHardware | None = None
    ) -> None:
        if num_nodes < 1:
            raise ValueError(f"num_nodes={num_nodes}: a cluster needs at least one node")
        self.workdir = Path(workdir).resolve()
        self.num_nodes = num_nodes
        self.hardware = hardware  # what slurm.conf declares beyond CPUs (GRES, partitions)
        self.token = secrets.token_hex(3)
        self.nodes: tuple[Node, ...] = ()
        self.head_addr = ""
        self.slurm: LocalSlurm | None = None
        self.short_names_on: Interface = "ib0"
        self._record: _Record | None = None
        self.login: Node | None = None
        self._holders: dict[str, subprocess.Popen[bytes]] = {}
        self._started_pids: dict[str, int] = {}  # every holder and daemon, for leftovers()

    # -- use -------------------------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """Variables that make Slurm commands use this cluster."""
        return self._started_slurm().env

    @property
    def hosts_file(self) -> Path:
        """The file every node sees as ``/etc/hosts``."""
        return self.workdir / "hosts"

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.nodes)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r} in this cluster ({', '.join(self.node_names)})")

    def on_node(self, name: str, argv: Sequence[str], cwd: Path | None = None) -> list[str]:
        """``argv`` as a command line that runs on node ``name`` (in its namespaces).

        Entering a mount namespace resets the working directory to ``/``; ``cwd`` sets it.
        """
        holder = self._holders.get(name)
        if holder is None or holder.poll() is not None:
            raise NamespaceClusterError(f"node {name} is not running")
        wd = [f"--wd={cwd}"] if cwd is not None else []
        return ["nsenter", "-t", str(holder.pid), "--net", "--uts", "--mount", *wd, "--", *argv]

    def resolve_short_names_to(self, interface: Interface) -> None:
        """Make every node's short name (``node1``) resolve to that node's ``ib0`` (CSC: the
        short hostname is the InfiniBand name) or ``eth0`` address (JSC: only ``node1i`` is
        on the fabric). Rewrites the file in place: the nodes' bind mounts follow its inode."""
        lines = ["127.0.0.1 localhost", f"# short names on {interface}"]
        for node in self.nodes:
            short = node.fabric_addr if interface == "ib0" else node.mgmt_addr
            lines.append(f"{short} {node.name}")
            lines.append(f"{node.fabric_addr} {node.suffix_name}")
        with self.hosts_file.open("w") as handle:
            handle.write("\n".join(lines) + "\n")
        self.short_names_on = interface

    @contextlib.contextmanager
    def short_names(self, interface: Interface) -> Iterator[None]:
        """Within the block, short names resolve to ``interface``; restored afterwards."""
        before = self.short_names_on
        self.resolve_short_names_to(interface)
        try:
            yield
        finally:
            self.resolve_short_names_to(before)

    def interface_bytes(self, name: str, interface: Interface) -> int:
        """Bytes received plus sent so far on one node's interface (kernel counters)."""
        node = self.node(name)
        proc = _ip("-n", node.netns, "-j", "-s", "link", "show", "dev", interface)
        stats = json.loads(proc.stdout)[0]["stats64"]
        return int(stats["rx"]["bytes"]) + int(stats["tx"]["bytes"])

    @property
    def rsh_agent(self) -> Path:
        """An ``rsh``-like command for Open MPI's ``plm_rsh_agent``: ``AGENT NODE COMMAND...``
        runs the shell command COMMAND on NODE (in its namespaces)."""
        return self.workdir / "rsh-agent"

    def _write_rsh_agent(self) -> None:
        cases = "".join(
            f"    {node}) pid={holder.pid} ;;\n" for node, holder in self._holders.items()
        )
        self.rsh_agent.write_text(
            "#!/bin/sh\n"
            f"# Open MPI's rsh agent for namespace cluster {self.token}: $1 is the node.\n"
            'case "$1" in\n'
            f"{cases}"
            '    *) echo "rsh-agent: no node $1 in this cluster" >&2; exit 255 ;;\n'
            "esac\n"
            "shift\n"
            'exec nsenter -t "$pid" --net --uts --mount -- sh -c "$*"\n'
        )
        self.rsh_agent.chmod(0o755)

    @property
    def started_pids(self) -> dict[str, int]:
        """PIDs of every holder and daemon this cluster started, by what they are."""
        return dict(self._started_pids)

    def leftovers(self) -> list[str]:
        """What of this cluster still exists (empty after ``stop``)."""
        left = [f"namespace {name}" for name in self._names() if (NETNS_DIR / name).exists()]
        links = _ip("-o", "link", "show").stdout
        left += [f"link {link}" for link in self._links() if f" {link}@" in links]
        left += [
            f"{what} (PID {pid})"
            for what, pid in self._started_pids.items()
            if Path(f"/proc/{pid}").exists() and not _is_zombie(pid)
        ]
        if (REGISTRY_DIR / f"{self.token}.json").exists():
            left.append(f"registry entry {REGISTRY_DIR / self.token}.json")
        return left

    # -- life cycle ------------------------------------------------------------------------

    def __enter__(self) -> NamespaceCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, timeout_s: float = 120) -> None:
        """Build the network, start the node holders and Slurm; return once ``srun`` runs on
        every node. On any failure everything built so far is removed."""
        if self._record is not None:
            raise NamespaceClusterError(f"cluster {self.token} is already started")
        deadline = time.monotonic() + timeout_s
        sweep_stale()
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._allocate()
            self._build_network()
            self.resolve_short_names_to(self.short_names_on)
            for node in self.nodes:
                self._start_holder(node, deadline)
                self._install_filter(node)
            self._write_rsh_agent()
            self.slurm = LocalSlurm(
                self.workdir / "slurm",
                nodes=[
                    SlurmNode(n.name, n.mgmt_addr, tuple(self.on_node(n.name, [])))
                    for n in self.nodes
                ],
                controller_addr=self.head_addr,
                settings={
                    "SlurmdPort": SLURMD_PORT,
                    "SrunPortRange": "{}-{}".format(*SRUN_PORT_RANGE),
                    **({"GresTypes": "gpu"} if self.hardware and self.hardware.gres else {}),
                },
                hardware=self.hardware,
                # PMIx's step daemons would otherwise talk to each other directly on
                # kernel-chosen ports, which the eth0 filter drops; this way their messages
                # go through slurmd's port, like all of Slurm's traffic.
                mpi_settings={"PMIxDirectConn": "false"},
            )
            self.slurm.start(timeout_s=max(deadline - time.monotonic(), 10.0))
            self._started_pids.update(self.slurm.pids)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop Slurm, the holders and every process left on the nodes; delete the
        namespaces and links and the registry entry (idempotent)."""
        if self.slurm is not None:
            self.slurm.stop()
        for holder in self._holders.values():
            if holder.poll() is None:
                holder.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                holder.wait(STOP_WAIT_S)
        self._holders.clear()
        self.login = None
        if self._record is None:
            return
        left = self._record.remove_resources()
        if left:
            raise NamespaceClusterError(
                f"cluster {self.token}: could not remove {', '.join(left)}; "
                f"its registry entry {self._record.path} is kept for the next sweep"
            )
        self._record.path.unlink(missing_ok=True)
        self._record = None

    def start_login_node(self, timeout_s: float = 30) -> Node:
        """The login node (made once): a namespace on the management network, with its own
        hostname, ``/etc/hosts`` and ``/sys``; ``on_node(LOGIN, ...)`` runs a command there."""
        if self._record is None:
            raise NamespaceClusterError(f"cluster {self.token} is not started")
        if self.login is not None:
            return self.login
        mgmt = ipaddress.ip_network(self._record.mgmt_subnet)
        node = Node(
            LOGIN, f"ddpimg-{self.token}-{LOGIN}", str(mgmt.network_address + LOGIN_HOST_OFFSET), ""
        )
        switch = f"ddpimg-{self.token}-switch"
        _ip("netns", "add", node.netns)
        _ip("-n", node.netns, "link", "set", "lo", "up")
        port = f"eth0-{LOGIN}"
        _ip("-n", switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
            "netns", node.netns)  # fmt: skip
        _ip("-n", switch, "link", "set", port, "master", "br-mgmt", "up")
        _ip("-n", node.netns, "addr", "add", f"{node.mgmt_addr}/24", "dev", "eth0")
        _ip("-n", node.netns, "link", "set", "eth0", "up")
        self._start_holder(node, time.monotonic() + timeout_s)
        self.login = node
        return node

    # -- building --------------------------------------------------------------------------

    def _names(self) -> list[str]:
        # The login node's namespace is listed whether made or not: removal skips a missing one.
        names = ("switch", *self._node_names(), LOGIN)
        return [f"ddpimg-{self.token}-{name}" for name in names]

    def _node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.num_nodes + 1)]

    def _links(self) -> list[str]:
        return [f"ddm{self.token}"]

    def _allocate(self) -> None:
        """Choose a free management /24 and its fabric neighbour; register before building."""
        with _registry_lock():
            used = _subnets_in_use()
            for mgmt in SUBNET_POOL.subnets(new_prefix=24):
                octet = int(mgmt.network_address.packed[2])
                if octet % 2:
                    continue
                fabric = ipaddress.ip_network(f"{mgmt.network_address + 256}/24")
                if mgmt in used or fabric in used:
                    continue
                break
            else:
                raise NamespaceClusterError(f"no free /24 pair left in {SUBNET_POOL}")
            self._record = _Record(
                token=self.token,
                owner_pid=os.getpid(),
                owner_start=_process_start(os.getpid()) or "",
                mgmt_subnet=str(mgmt),
                namespaces=self._names(),
                links=self._links(),
            )
            self._record.save()
        self.head_addr = str(mgmt.network_address + 1)
        self.nodes = tuple(
            Node(
                name=name,
                netns=f"ddpimg-{self.token}-{name}",
                mgmt_addr=str(mgmt.network_address + 10 + index),
                fabric_addr=str(fabric.network_address + 10 + index),
            )
            for index, name in enumerate(self._node_names(), start=1)
        )

    def _build_network(self) -> None:
        switch = f"ddpimg-{self.token}-switch"
        uplink = self._links()[0]
        _ip("netns", "add", switch)
        for bridge in ("br-mgmt", "br-fab"):
            _ip("-n", switch, "link", "add", bridge, "type", "bridge")
            _ip("-n", switch, "link", "set", bridge, "up")
        # The head node (root namespace): slurmctld and srun, on the management network only.
        _ip("link", "add", uplink, "type", "veth", "peer", "name", "head", "netns", switch)
        _ip("-n", switch, "link", "set", "head", "master", "br-mgmt", "up")
        _ip("addr", "add", f"{self.head_addr}/24", "dev", uplink)
        _ip("link", "set", uplink, "up")
        for index, node in enumerate(self.nodes, start=1):
            _ip("netns", "add", node.netns)
            _ip("-n", node.netns, "link", "set", "lo", "up")
            # eth0 is made first: `hostname -I` lists addresses in interface order.
            for iface, bridge, addr in (
                ("eth0", "br-mgmt", node.mgmt_addr),
                ("ib0", "br-fab", node.fabric_addr),
            ):
                port = f"{iface}-n{index}"
                _ip("-n", switch, "link", "add", port, "type", "veth", "peer", "name", iface,
                    "netns", node.netns)  # fmt: skip
                _ip("-n", switch, "link", "set", port, "master", bridge, "up")
                _ip("-n", node.netns, "addr", "add", f"{addr}/24", "dev", iface)
                _ip("-n", node.netns, "link", "set", iface, "up")

    def _start_holder(self, node: Node, deadline: float) -> None:
        log = self.workdir / "log" / f"holder-{node.name}.out"
        log.parent.mkdir(parents=True, exist_ok=True)
        parking = self.workdir / f"cgroup-{node.name}"
        parking.mkdir(exist_ok=True)
        argv = [
            "setpriv", "--pdeathsig", "KILL", "--",
            "nsenter", f"--net={NETNS_DIR / node.netns}", "--",
            "unshare", "--mount", "--uts", "--propagation", "private", "--",
            "sh", "-c", _HOLDER_SCRIPT, "holder", node.name, str(self.hosts_file), str(parking),
        ]  # fmt: skip
        with log.open("wb") as handle:
            holder = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._holders[node.name] = holder
        self._started_pids[f"holder {node.name}"] = holder.pid
        while "ready" not in log.read_text(errors="replace"):
            if holder.poll() is not None:
                raise NamespaceClusterError(
                    f"node {node.name}: namespace holder exited {holder.returncode}: "
                    f"{log.read_text(errors='replace').strip()}"
                )
            if time.monotonic() > deadline:
                raise NamespaceClusterError(f"node {node.name}: holder not ready in time")
            time.sleep(_POLL_S)

    def _install_filter(self, node: Node) -> None:
        """Drop every connection arriving on eth0 except Slurm's (slurmd, srun's ports)."""
        low, high = SRUN_PORT_RANGE
        rules = f"""
table inet {FILTER_TABLE} {{
    chain input {{
        type filter hook input priority filter; policy accept;
        iifname != "eth0" accept
        ct state established,related accept
        tcp dport {{ {SLURMD_PORT}, {low}-{high} }} accept
        counter drop
    }}
}}
"""
        proc = subprocess.run(
            self.on_node(node.name, ["nft", "-f", "-"]),
            input=rules,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        if proc.returncode != 0:
            raise NamespaceClusterError(
                f"node {node.name}: nft could not install the eth0 filter: {proc.stderr.strip()}"
            )

    def _started_slurm(self) -> LocalSlurm:
        if self.slurm is None or not self.slurm.pids:
            raise NamespaceClusterError(f"cluster {self.token} is not started")
        return self.slurm
