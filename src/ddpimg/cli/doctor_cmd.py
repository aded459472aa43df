"""``ddpimg doctor``: run under the same launcher as ``train``; every rank reports what it
sees, rank 0 prints a table, and the exit status is non-zero when any check fails. The
checks are ``ddpimg.runtime.doctor`` (per rank) and ``ddpimg.runtime.links`` (each node's
links, on several nodes); this module parses and prints."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from ddpimg import errors, exitcodes
from ddpimg.cli.launch_options import (
    add_local_rank_argument,
    add_nproc_argument,
    add_site_options,
    local_workers,
    plan_from_args,
)
from ddpimg.cli.local_workers import launch_local_workers, strip_nproc
from ddpimg.errors import ProfileError
from ddpimg.runtime.doctor import bind, check_allreduce, local_report, measure_bus_bandwidth
from ddpimg.runtime.links import LINK_BYTES, LINK_ITERATIONS, LinkResult, ring_rounds
from ddpimg.runtime.reexec import needs_reexec, reexec_clean


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_site_options(parser)
    parser.add_argument("--json", action="store_true", help="rank 0 also prints the rows as JSON")
    add_nproc_argument(parser)
    add_local_rank_argument(parser)


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


def node_list(rows: Sequence[dict[str, Any]]) -> list[tuple[str, list[int]]]:
    """(host, its ranks) of every node, in the order of their lowest rank."""
    nodes: dict[str, list[int]] = {}
    for row in sorted(rows, key=lambda row: row["rank"]):
        nodes.setdefault(row["host"], []).append(row["rank"])
    return list(nodes.items())


def render_links(links: Sequence[LinkResult], num_nodes: int, floor_gbps: float) -> list[str]:
    """The links' lines: how they were measured, then one line a link."""
    rounds = len(ring_rounds(num_nodes))
    judged = (
        f"floor {floor_gbps:g} GB/s (fabric.min_busbw_gbps)"
        if floor_gbps
        else "not judged: the profile sets no fabric.min_busbw_gbps"
    )
    lines = [
        f"links: each of {num_nodes} nodes with its ring neighbours, {rounds} round(s) of "
        f"{LINK_ITERATIONS} all-reduces ({LINK_BYTES['cpu'] >> 20} MiB on CPUs, "
        f"{LINK_BYTES['cuda'] >> 20} MiB on GPUs); {judged}"
    ]
    for link in links:
        below = " (below the floor)" if floor_gbps and link.busbw_gbps < floor_gbps else ""
        lines.append(f"link {link.a} - {link.b}: bus bandwidth {link.busbw_gbps:.3g} GB/s{below}")
    return lines


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
    from ddpimg.runtime.links import judge_links, measure_links

    device = bind(report)
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
        nodes = node_list(rows)
        floor = plan.site.fabric.min_busbw_gbps
        links = measure_links(device, nodes, ctx.rank) if len(nodes) > 1 else []
        verdict = judge_links(links, floor, plan.site.name)
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
            if links:
                print("\n".join(render_links(links, len(nodes), floor)))
            for row in rows:
                for problem in row["problems"]:
                    print(f"problem: rank {row['rank']} on {row['host']}: {problem}")
            for problem in verdict.problems:
                print(f"problem: {problem}")
            if args.json:
                record = {
                    "rows": rows,
                    "busbw_gbps": busbw,
                    "links": [asdict(link) for link in links],
                    "slow_nodes": list(verdict.slow_nodes),
                    "ok": not (failed or verdict.problems),
                }
                print(json.dumps(record))
        return exitcodes.CHECK_FAILED if failed or verdict.problems else exitcodes.OK
    finally:
        runtime.shutdown()
