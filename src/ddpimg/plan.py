"""The launch plan: the exact environment the training process gets. Pure; no torch.

    environment -> topology -> site profile -> plan

Precedence, documented once (docs/launchers.md, "Precedence"): a command-line flag > a ``DDPIMG_*``
variable > a variable the user already exported > the site profile > the built-in default.
MASTER_ADDR and MASTER_PORT follow the same order: an explicit value (torchrun's, or one the
user exported) is taken as it is; otherwise the address is the first node of the job after the
profile's rule, and the port is derived from the job and step ids within the profile's range.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddpimg.cleanenv import CleanEnvironment, clean_environment, parse_keep_list
from ddpimg.errors import LauncherError
from ddpimg.site.fabric import explain_fabric, fabric_env
from ddpimg.site.master import apply_master_rule
from ddpimg.site.model import SiteProfile
from ddpimg.site.select import select_profile
from ddpimg.topology import Topology, derive_port, resolve_topology

LOOPBACK = "127.0.0.1"

# The variables that place one process in the job; a local launcher (``--nproc-per-node``)
# must not export its own to the workers it starts.
RANK_VARIABLES = (
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
)


@dataclass(frozen=True)
class LaunchPlan:
    """Everything ``ddpimg env`` prints and the runtime applies.

    ``master_addr`` is empty when only rank 0 can tell it at run time (``mpirun`` without a
    host list, or an ``interface:`` rule); the runtime then fills it in before the rendezvous.
    """

    topology: Topology
    site: SiteProfile
    site_reason: str
    master_addr: str
    master_port: int
    exports: tuple[tuple[str, str], ...]  # sorted (name, value), MASTER_ADDR only when known
    clean: CleanEnvironment
    notes: tuple[str, ...]  # how each value was decided, for --explain

    removed_before: tuple[str, ...] = ()  # removed by an earlier re-exec (DDPIMG_REMOVED)
    # This node's address by the profile's rule: what the other nodes use to reach it (a
    # per-node launcher's own address, e.g. torchrun --local-addr); "" when only known at run
    # time (an interface rule).
    node_addr: str = ""

    @property
    def removed(self) -> tuple[str, ...]:
        """Host variables the training process does not get, sorted."""
        return tuple(sorted(set(self.clean.removed) | set(self.removed_before)))

    @property
    def needs_runtime_master(self) -> bool:
        return not self.master_addr

    def child_environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` cleaned and with the plan's exports: what the training process sees."""
        child = self.clean.apply(env)
        child.update(self.exports)
        return child

    def to_json(self) -> dict[str, Any]:
        t = self.topology
        return {
            "source": t.source,
            "rank": t.rank,
            "world_size": t.world_size,
            "local_rank": t.local_rank,
            "local_world_size": t.local_world_size,
            "node_rank": t.node_rank,
            "num_nodes": t.num_nodes,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "node_addr": self.node_addr,
            "site": self.site.name,
            "site_path": self.site.path,
            "site_hash": self.site.content_hash,
            "site_reason": self.site_reason,
            "hosts": list(t.hosts),
            "env": dict(self.exports),
            "removed": list(self.removed),
        }


def _master_addr(topology: Topology, profile: SiteProfile, notes: list[str]) -> str:
    if topology.master_addr_explicit:
        notes.append(f"MASTER_ADDR={topology.master_node}: given by the launcher or the user")
        return topology.master_node
    if topology.master_node:
        addr = apply_master_rule(profile, topology.master_node)
        if addr:
            notes.append(
                f"MASTER_ADDR={addr}: first node {topology.master_node!r} after the "
                f"{profile.name} rule {profile.master_addr!r}"
            )
        else:
            notes.append(f"MASTER_ADDR: rank 0 publishes {profile.master_addr!r} at run time")
        return addr
    if topology.all_local:
        notes.append("MASTER_ADDR=127.0.0.1: every rank runs on this machine")
        return LOOPBACK
    notes.append(
        f"MASTER_ADDR: {topology.source} gives no host list; rank 0 publishes its address at "
        "run time (mpi4py broadcast)"
    )
    return ""


def _master_port(topology: Topology, profile: SiteProfile, notes: list[str]) -> int:
    if topology.master_port is not None:
        notes.append(f"MASTER_PORT={topology.master_port}: given by the launcher or the user")
        return topology.master_port
    port = derive_port(topology.job_key, profile.port_range)
    lo, hi = profile.port_range
    if topology.job_key:
        why = f"derived from job key {topology.job_key!r} in {profile.name}'s range {lo}-{hi}"
    else:  # one process outside any launcher: nothing names a job, nothing can clash
        why = f"the first of {profile.name}'s range {lo}-{hi} (no launcher names a job)"
    notes.append(f"MASTER_PORT={port}: {why}")
    return port


def _interface_exports(profile: SiteProfile) -> dict[str, str]:
    if not profile.interfaces:
        return {}
    joined = ",".join(profile.interfaces)
    return {"NCCL_SOCKET_IFNAME": joined, "GLOO_SOCKET_IFNAME": joined}


def check_local_rank_flag(topology: Topology, flag: int | None, env: Mapping[str, str]) -> None:
    """Refuse a ``--local-rank`` (as torch.distributed.launch and DeepSpeed's launcher pass it)
    that disagrees with the local rank resolved from the launcher's variables."""
    if flag is None:
        return
    exported = env.get("LOCAL_RANK", str(flag)).strip()
    if exported != str(flag):
        found = f"LOCAL_RANK={exported}"
    elif flag != topology.local_rank:
        found = f"the local rank {topology.local_rank} that {topology.source} gives"
    else:
        return
    raise LauncherError(
        f"--local-rank={flag} disagrees with {found}",
        "the launcher passes both for the same process; drop --local-rank, or look for a "
        "LOCAL_RANK exported by hand or left over from another launch",
    )


def _replaced_exports(env: Mapping[str, str], topology: Topology) -> list[str]:
    """Notes for rank variables found in ``env`` that the resolved topology replaces."""
    values = {
        "RANK": topology.rank,
        "WORLD_SIZE": topology.world_size,
        "LOCAL_RANK": topology.local_rank,
        "LOCAL_WORLD_SIZE": topology.local_world_size,
    }
    return [
        f"{name}={env[name].strip()}: replaced by {value} from the {topology.source} launch"
        for name, value in values.items()
        if name in env and env[name].strip() != str(value)
    ]


def build_plan(
    env: Mapping[str, str],
    hostname: str,
    site: str | None = None,
    keep: tuple[str, ...] = (),
    local_rank: int | None = None,
) -> LaunchPlan:
    """Resolve topology and site from ``env`` and compute the plan. Pure.

    ``hostname`` is the short host name (auto-selection of the profile uses it); ``site`` is the
    ``--site`` flag; ``keep`` the ``--keep-env`` patterns; ``local_rank`` the ``--local-rank``
    flag, checked against the resolved topology.
    """
    topology = resolve_topology(env)
    check_local_rank_flag(topology, local_rank, env)
    selection = select_profile(env, hostname, explicit=site)
    profile = selection.profile
    notes: list[str] = [
        f"source={topology.source}",
        *topology.notes,
        *_replaced_exports(env, topology),
        f"site={profile.name} ({selection.reason})",
    ]
    if profile.retired_notice:
        notes.append(profile.retired_notice)
    notes += explain_fabric(profile)
    master_addr = _master_addr(topology, profile, notes)
    master_port = _master_port(topology, profile, notes)

    flags = tuple(pattern for value in keep for pattern in parse_keep_list(value))
    keep_patterns = flags + parse_keep_list(env.get("DDPIMG_KEEP_ENV", "")) + profile.keep
    clean = clean_environment(
        env,
        extra_remove=profile.remove,
        keep=keep_patterns,
        library_dirs=profile.fabric.library_paths,
    )

    # The profile's [env] wins over its [fabric] variables, which win over the interfaces.
    fabric_exports, fabric_notes = fabric_env(profile, topology.num_nodes)
    notes += fabric_notes
    site_exports = {
        **_interface_exports(profile),
        **fabric_exports,
        **dict(profile.exports),
    }
    exports: dict[str, str] = {}
    for name, value in sorted(site_exports.items()):
        if name in env and name not in clean.removed and env[name] != value:
            notes.append(
                f"{name}={env[name]}: kept the exported value over {profile.name}'s {value!r}"
            )
            exports[name] = env[name]
        else:
            exports[name] = value
    exports.update(
        {
            "MASTER_PORT": str(master_port),
            "RANK": str(topology.rank),
            "WORLD_SIZE": str(topology.world_size),
            "LOCAL_RANK": str(topology.local_rank),
            "LOCAL_WORLD_SIZE": str(topology.local_world_size),
        }
    )
    if master_addr:
        exports["MASTER_ADDR"] = master_addr
    return LaunchPlan(
        topology=topology,
        site=profile,
        site_reason=selection.reason,
        master_addr=master_addr,
        master_port=master_port,
        exports=tuple(sorted(exports.items())),
        clean=clean,
        notes=tuple(notes),
        removed_before=tuple(n for n in env.get("DDPIMG_REMOVED", "").split(",") if n),
        node_addr=apply_master_rule(profile, hostname),
    )
