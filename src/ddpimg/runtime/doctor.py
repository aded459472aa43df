"""``ddpimg doctor``'s measurements (``run_checks``): what each rank sees (host, device,
interfaces, /dev/shm), then among all ranks whether an all-reduce adds up and its bus
bandwidth (``allreduce``), the transport NCCL chose (``nccl_debug``) and each node's links
(``links``), gathered on every rank. The command (``cli/doctor_cmd.py``) prints the result
and sets the exit status."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from ddpimg.errors import LauncherError, ProfileError
from ddpimg.plan import LaunchPlan
from ddpimg.runtime.defaults import DEFAULT_TIMEOUT_S
from ddpimg.runtime.interfaces import interface_names, ipv4_address, missing_interfaces
from ddpimg.runtime.links import LinkResult, LinkVerdict

if TYPE_CHECKING:
    import torch


@dataclass
class RankReport:
    """What one rank sees. Gathered to every rank."""

    rank: int
    host: str
    local_rank: int
    local_world_size: int
    node_rank: int
    device: str = ""
    visible_gpus: str = ""
    interfaces: dict[str, str] = field(default_factory=dict)  # profile's interface -> IPv4
    shm_gib: float = 0.0
    removed: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class NotJoined:
    """This rank stopped before it met the others: an interface the profile names is
    missing, /dev/shm is missing, or the runtime refused the profile. No process group can
    gather that, so the rank says it itself."""

    rank: int
    host: str
    problems: tuple[str, ...]


@dataclass(frozen=True)
class Checkup:
    """What all ranks found, gathered on every rank."""

    rows: tuple[RankReport, ...]  # every rank's, in rank order
    is_main: bool  # this rank prints
    backend: str
    master_addr: str
    master_port: int
    busbw_gbps: float  # the all-reduce among all ranks
    transport: str  # NCCL's choice in one line, or why it was not checked
    num_nodes: int
    links: tuple[LinkResult, ...]  # each node with its ring neighbours; none on one node
    verdict: LinkVerdict

    @property
    def ranks_failed(self) -> bool:
        """Whether any rank found a problem (a wrong all-reduce among them)."""
        return any(row.problems for row in self.rows)

    @property
    def ok(self) -> bool:
        return not (self.ranks_failed or self.verdict.problems)


def local_report(plan: LaunchPlan) -> RankReport:
    topo = plan.topology
    report = RankReport(
        rank=topo.rank,
        host=socket.gethostname().split(".")[0],
        local_rank=topo.local_rank,
        local_world_size=topo.local_world_size,
        node_rank=topo.node_rank,
        visible_gpus=os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"),
        removed=len(plan.removed),
    )
    for name in missing_interfaces(plan.site.interfaces):
        report.problems.append(
            f"interface {name} (profile {plan.site.name}) does not exist on {report.host}; "
            f"present: {', '.join(interface_names())}"
        )
    for name in plan.site.interfaces:
        report.interfaces[name] = ipv4_address(name) or "-"
    try:
        stat = os.statvfs("/dev/shm")
        report.shm_gib = stat.f_frsize * stat.f_blocks / 2**30
    except OSError:
        report.problems.append("/dev/shm is missing (NCCL and DataLoader workers need it)")
    return report


def bind(report: RankReport) -> torch.device:
    """This rank's device; a layout problem is recorded in ``report`` (the CPU then)."""
    import torch

    from ddpimg.runtime.device import bind_device

    try:
        return bind_device(report.local_rank, report.local_world_size)
    except LauncherError as err:
        report.problems.append(err.message)
        return torch.device("cpu")


def node_list(rows: Sequence[RankReport]) -> list[tuple[str, list[int]]]:
    """(host, its ranks) of every node, in the order of their lowest rank."""
    nodes: dict[str, list[int]] = {}
    for row in sorted(rows, key=lambda row: row.rank):
        nodes.setdefault(row.host, []).append(row.rank)
    return list(nodes.items())


def run_checks(
    plan: LaunchPlan,
    backend: str = "",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_checkup: Callable[[Checkup], None] | None = None,
) -> NotJoined | Checkup:
    """Every check on this rank, then (collective: every rank of the plan calls this) the
    all-reduce, its bandwidth, the transport and the links among all ranks. ``backend``:
    ``--backend`` ("" for the site's, else by device). ``on_checkup`` sees the result before
    the process group's closing barrier: a peer that dies in that barrier must not cost the
    report of everything measured."""
    report = local_report(plan)
    if report.problems:
        # Without the interfaces no process group can form: this rank stops here.
        return NotJoined(report.rank, report.host, tuple(report.problems))

    import torch.distributed as dist

    from ddpimg import runtime
    from ddpimg.runtime import nccl_debug
    from ddpimg.runtime.allreduce import check_allreduce, measure_bus_bandwidth
    from ddpimg.runtime.device import default_backend
    from ddpimg.runtime.links import judge_links, measure_links

    device = bind(report)
    report.device = str(device)
    chosen = default_backend(device, backend or plan.site.backend)
    nccl_log = nccl_debug.start(chosen, report.rank)
    try:
        ctx = runtime.initialize(plan, backend=backend, timeout_s=timeout_s, device=device)
    except ProfileError as err:
        return NotJoined(report.rank, report.host, (str(err),))
    try:
        wrong = check_allreduce(device, ctx.world_size, ctx.rank)
        if wrong:
            report.problems.append(wrong)
        busbw = measure_bus_bandwidth(device, ctx.world_size)
        transport, problems = nccl_debug.finish(nccl_log, chosen, plan, busbw, report.shm_gib)
        report.problems += problems
        gathered: list[RankReport | None] = [None] * ctx.world_size
        dist.all_gather_object(gathered, report)
        rows = tuple(cast("list[RankReport]", gathered))
        nodes = node_list(rows)
        links = measure_links(device, nodes, ctx.rank) if len(nodes) > 1 else []
        checkup = Checkup(
            rows=rows,
            is_main=ctx.is_main,
            backend=ctx.backend,
            master_addr=ctx.run_info["master_addr"],
            master_port=ctx.run_info["master_port"],
            busbw_gbps=busbw,
            transport=transport,
            num_nodes=len(nodes),
            links=tuple(links),
            verdict=judge_links(links, plan.site.fabric.min_busbw_gbps, plan.site.name),
        )
        if on_checkup is not None:
            on_checkup(checkup)
        return checkup
    finally:
        runtime.shutdown()
