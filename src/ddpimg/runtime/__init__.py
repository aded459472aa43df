"""The only layer that touches the process: applies the plan, binds the device, meets the
other ranks and initialises torch.distributed. Imports torch lazily."""

from __future__ import annotations

import functools
import os
import socket
from datetime import timedelta
from typing import TYPE_CHECKING

from ddpimg.errors import LauncherError, ProfileError
from ddpimg.hardware.compat import TorchProbe, require_compatible
from ddpimg.host import short_hostname
from ddpimg.plan import LaunchPlan
from ddpimg.runtime.context import DistContext
from ddpimg.runtime.defaults import DEFAULT_TIMEOUT_S
from ddpimg.runtime.device import (
    bind_cpu_threads,
    bind_device,
    cpu_threads,
    default_backend,
    rank_cpu_share,
)
from ddpimg.runtime.fabric import check_fabric_paths
from ddpimg.runtime.flight_recorder import enable_flight_recorder
from ddpimg.runtime.interfaces import interface_names, missing_interfaces
from ddpimg.runtime.mpi_master import broadcast_master_address
from ddpimg.runtime.rendezvous import Stop, agent_store, join, no_signal, open_store
from ddpimg.runtime.stall import watch_enabled
from ddpimg.runtime.stall.watch import NCCL_EXTRA_S
from ddpimg.runtime.watchdog import collectives_stalled, deadline

if TYPE_CHECKING:
    import torch


def check_interfaces(plan: LaunchPlan) -> None:
    """Fail early and clearly when the profile names an interface this host lacks (Gloo and
    NCCL would otherwise fail inside init with a bare 'no such device')."""
    missing = missing_interfaces(plan.site.interfaces)
    if missing:
        raise ProfileError(
            f"site profile {plan.site.name} ({plan.site.path}) names network interface(s) "
            f"{', '.join(missing)} for NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME, but host "
            f"{short_hostname()} has only: {', '.join(interface_names())}",
            hint="pick the right profile with --site, or fix network.interfaces in it",
        )


def check_hardware(plan: LaunchPlan) -> None:
    """Before any rank meets another: the site's fabric paths exist in this container, and
    the image's torch build can drive this machine's GPU (both exit status 2)."""
    check_fabric_paths(plan.site)
    require_compatible(TorchProbe())


def apply_plan(plan: LaunchPlan, *, publish_master: bool = True) -> str:
    """Export the plan into this process's environment; returns the master address, asking
    rank 0 over MPI when the launcher gave no host list. Without ``publish_master`` that
    question is left to the process that will be the MPI rank (``""`` is returned)."""
    os.environ.update(dict(plan.exports))
    master = plan.master_addr
    if not master:
        if not plan.topology.master_via_mpi:
            raise LauncherError(
                f"site profile {plan.site.name}: network.master_addr={plan.site.master_addr!r} "
                "can only be resolved by rank 0 over MPI, but this is a "
                f"{plan.topology.source} job",
                hint="use a '{node}' template in the profile, or export MASTER_ADDR",
            )
        if not publish_master:
            return ""
        master = broadcast_master_address(plan.site, short_hostname())
        os.environ["MASTER_ADDR"] = master
    return master


def rendezvous_port(plan: LaunchPlan) -> int:
    """The plan's port, except for a job on this machine alone with no port given: there a
    free port is taken, so two local runs on one laptop do not collide."""
    topo = plan.topology
    if not topo.all_local or topo.world_size > 1 or topo.master_port is not None:
        return plan.master_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def initialize(
    plan: LaunchPlan,
    backend: str = "",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    device: torch.device | None = None,
    devices_per_rank: int = 1,
    *,
    trace_dir: str | None = None,
    stall_watch: bool = False,
    stop: Stop | None = None,
) -> DistContext:
    """Apply the plan, check that the image's torch can drive this GPU, bind the device
    (unless one is given; the first of ``devices_per_rank`` when a rank drives several),
    join, and initialise the default process group. With NCCL, the flight recorder dumps
    into ``trace_dir`` when a collective outlives the timeout. ``stall_watch``: the caller
    runs ``ddpimg.runtime.stall``'s watch, which gives up on a stuck NCCL collective after
    the timeout; NCCL's own watchdog, which ends the process without a word, then waits
    ``NCCL_EXTRA_S`` longer. ``stop``: the preemption signal received, if any; the join
    ends at once when one arrives (``errors.StartStopped``)."""
    import torch.distributed as dist
    from torch.distributed import PrefixStore  # type: ignore[attr-defined]  # public re-export

    topo = plan.topology
    check_interfaces(plan)
    master = apply_plan(plan)
    check_hardware(plan)
    if device is None:
        device = bind_device(topo.local_rank, topo.local_world_size, devices_per_rank)
    chosen = default_backend(device, backend or plan.site.backend)
    use_agent_store = agent_store(os.environ)
    enable_flight_recorder(chosen, trace_dir)
    port = rendezvous_port(plan)
    store = open_store(master, port, topo.rank, timeout_s, use_agent_store, stop=stop or no_signal)
    join(
        store,
        rank=topo.rank,
        world_size=topo.world_size,
        hostname=short_hostname(),
        timeout_s=timeout_s,
        host_of_rank=topo.host_of_rank,
        stop=stop or no_signal,
    )
    stalled = functools.partial(collectives_stalled, chosen, timeout_s, topo.rank, dict(os.environ))
    watched = stall_watch and chosen == "nccl" and watch_enabled(os.environ, topo.world_size)
    with deadline(timeout_s, stalled):
        dist.init_process_group(
            backend=chosen,
            store=PrefixStore("ddpimg/pg", store),
            rank=topo.rank,
            world_size=topo.world_size,
            timeout=timedelta(seconds=timeout_s + (NCCL_EXTRA_S if watched else 0.0)),
        )
    run_info = plan.to_json() | {
        "master_addr": master,
        "master_port": port,
        "backend": chosen,
        "device": str(device),
    }
    share = rank_cpu_share(topo.local_world_size, topo.rank_is_task)
    threads = None
    if device.type == "cpu":
        threads = cpu_threads(share, os.environ)
        run_info["cpu_threads"] = bind_cpu_threads(threads)
    return DistContext(
        rank=topo.rank,
        world_size=topo.world_size,
        local_rank=topo.local_rank,
        local_world_size=topo.local_world_size,
        node_rank=topo.node_rank,
        num_nodes=topo.num_nodes,
        device=device,
        backend=chosen,
        timeout_s=timeout_s,
        cpu_share=share,
        cpu_threads_from_share=threads is not None,
        run_info=run_info,
    )


def shutdown(finished: bool = True) -> None:
    """Tear the process group down. After a finished run all ranks first meet in a barrier, so
    no rank closes its connections while a peer is still using them (Gloo aborts the process
    when a peer vanishes mid-operation)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    if finished:
        dist.barrier()
    dist.destroy_process_group()
