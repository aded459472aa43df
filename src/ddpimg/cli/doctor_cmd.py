"""``ddpimg doctor``: run under the same launcher as ``train``; every rank reports what it
sees, rank 0 prints a table, and the exit status is non-zero when any check fails."""

from __future__ import annotations

import argparse
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ddpimg import errors, exitcodes
from ddpimg.cli.launch_options import (
    add_local_rank_argument,
    add_nproc_argument,
    add_site_options,
    local_workers,
    plan_from_args,
)
from ddpimg.cli.local_workers import launch_local_workers, strip_nproc
from ddpimg.errors import LauncherError, ProfileError
from ddpimg.plan import LaunchPlan
from ddpimg.runtime.interfaces import interface_names, ipv4_address, missing_interfaces
from ddpimg.runtime.reexec import needs_reexec, reexec_clean

if TYPE_CHECKING:
    import torch

CORRECTNESS_ELEMENTS = 1 << 20
BANDWIDTH_BYTES = {"cpu": 16 << 20, "cuda": 256 << 20}
BANDWIDTH_ITERATIONS = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_site_options(parser)
    parser.add_argument("--json", action="store_true", help="rank 0 also prints the rows as JSON")
    add_nproc_argument(parser)
    add_local_rank_argument(parser)


@dataclass
class RankReport:
    """What one rank sees. Gathered to rank 0."""

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


def _bind(report: RankReport) -> torch.device:
    import torch

    from ddpimg.runtime.device import bind_device

    try:
        return bind_device(report.local_rank, report.local_world_size)
    except LauncherError as err:
        report.problems.append(err.message)
        return torch.device("cpu")


def check_allreduce(device: torch.device, world_size: int, rank: int) -> str | None:
    """Sum of (rank + 1) over all ranks must be W(W+1)/2 in every element."""
    import torch
    import torch.distributed as dist

    tensor = torch.full((CORRECTNESS_ELEMENTS,), float(rank + 1), device=device)
    dist.all_reduce(tensor)
    expected = world_size * (world_size + 1) / 2
    wrong = int((tensor != expected).sum().item())
    if wrong:
        return (
            f"all-reduce wrong in {wrong} of {CORRECTNESS_ELEMENTS} elements "
            f"(expected {expected:g})"
        )
    return None


def measure_bus_bandwidth(device: torch.device, world_size: int) -> float:
    """All-reduce bus bandwidth in GB/s (nccl-tests' definition: algbw * 2(W-1)/W)."""
    import torch
    import torch.distributed as dist

    nbytes = BANDWIDTH_BYTES["cuda" if device.type == "cuda" else "cpu"]
    tensor = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dist.all_reduce(tensor)  # warm-up: connections, buffers
    if device.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(BANDWIDTH_ITERATIONS):
        dist.all_reduce(tensor)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = (time.perf_counter() - start) / BANDWIDTH_ITERATIONS
    factor = 2 * (world_size - 1) / world_size if world_size > 1 else 1.0
    return nbytes / elapsed * factor / 1e9


def render_table(rows: list[dict[str, Any]]) -> str:
    headers = [
        "rank",
        "host",
        "local",
        "node",
        "device",
        "CUDA_VISIBLE",
        "interfaces",
        "shm GiB",
        "removed",
    ]
    lines = [
        [
            str(r["rank"]),
            r["host"],
            f"{r['local_rank']}/{r['local_world_size']}",
            str(r["node_rank"]),
            r["device"],
            r["visible_gpus"],
            " ".join(f"{k}={v}" for k, v in r["interfaces"].items()) or "-",
            f"{r['shm_gib']:.1f}",
            str(r["removed"]),
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*headers), *(fmt.format(*line) for line in lines)])


def run(args: argparse.Namespace, argv: list[str]) -> int:
    import json

    env = dict(os.environ)
    plan = plan_from_args(args, env)
    if needs_reexec(plan, env):
        reexec_clean(plan, env, argv)
    nproc = local_workers(args)
    if nproc:
        program = ["-m", "ddpimg", *strip_nproc(argv)]
        return launch_local_workers(plan, nproc, program, timeout_s=args.timeout)
    report = local_report(plan)
    if report.problems:
        # Without the interfaces no process group can form: say so on this rank and stop.
        for problem in report.problems:
            errors.report(f"doctor: rank {report.rank} on {report.host}: {problem}")
        return exitcodes.CHECK_FAILED

    import torch.distributed as dist

    from ddpimg import runtime
    from ddpimg.runtime import nccl_debug
    from ddpimg.runtime.device import default_backend

    device = _bind(report)
    report.device = str(device)
    backend = default_backend(device, args.backend or plan.site.backend)
    nccl_log = nccl_debug.start(backend, report.rank)
    try:
        ctx = runtime.initialize(plan, backend=args.backend, timeout_s=args.timeout, device=device)
    except ProfileError as err:
        errors.report(f"doctor: rank {report.rank} on {report.host}: {err}")
        return exitcodes.CHECK_FAILED
    try:
        wrong = check_allreduce(device, ctx.world_size, ctx.rank)
        if wrong:
            report.problems.append(wrong)
        busbw = measure_bus_bandwidth(device, ctx.world_size)
        transport, problems = nccl_debug.finish(nccl_log, backend, plan, busbw, report.shm_gib)
        report.problems += problems
        rows: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(rows, asdict(report))
        failed = any(row["problems"] for row in rows)
        if ctx.is_main:
            print(render_table(rows))
            print(
                f"site {plan.site.name} ({plan.site_reason}); source {plan.topology.source}; "
                f"backend {ctx.backend}; "
                f"master {ctx.run_info['master_addr']}:{ctx.run_info['master_port']}"
            )
            print(
                f"all-reduce: {'FAILED' if failed else 'correct'}; bus bandwidth {busbw:.2f} GB/s"
            )
            print(transport)
            for row in rows:
                for problem in row["problems"]:
                    print(f"problem: rank {row['rank']} on {row['host']}: {problem}")
            if args.json:
                print(json.dumps({"rows": rows, "busbw_gbps": busbw, "ok": not failed}))
        return exitcodes.CHECK_FAILED if failed else exitcodes.OK
    finally:
        runtime.shutdown()
