"""``ddpimg doctor``: run under the same launcher as ``train``; every rank reports what it
sees, rank 0 prints a table, and the exit status is non-zero when any check fails. The
checks are ``ddpimg.runtime.doctor`` (per rank, gathered) and ``ddpimg.runtime.links`` (each
node's links, on several nodes); this module parses, starts them and prints their result."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from ddpimg import errors, exitcodes
from ddpimg.cli.launch import prepare_launch
from ddpimg.cli.launch_options import add_local_rank_argument, add_nproc_argument, add_site_options
from ddpimg.plan import LaunchPlan
from ddpimg.runtime.doctor import Checkup, NotJoined, RankReport, run_checks
from ddpimg.runtime.links import LINK_BYTES, LINK_ITERATIONS, LinkResult, ring_rounds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_site_options(parser)
    parser.add_argument("--json", action="store_true", help="rank 0 also prints the rows as JSON")
    add_nproc_argument(parser)
    add_local_rank_argument(parser)


def render_table(rows: Sequence[RankReport]) -> str:
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
            str(r.rank),
            r.host,
            f"{r.local_rank}/{r.local_world_size}",
            str(r.node_rank),
            r.device,
            r.visible_gpus,
            " ".join(f"{k}={v}" for k, v in r.interfaces.items()) or "-",
            f"{r.shm_gib:.1f}",
            str(r.removed),
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*headers), *(fmt.format(*line) for line in lines)])


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
    launch = prepare_launch(args, argv)
    if launch.local_workers:
        return launch.start_local_workers()

    def show(checkup: Checkup) -> None:
        if checkup.is_main:
            # Imported here: the module brings the training outputs' imports, which only an
            # answered checkup needs.
            from ddpimg.addon.mounted import explain_lines
            from ddpimg.buildinfo import read_build_info

            lines = render_image(read_build_info(os.environ)) + explain_lines(os.environ)
            lines += render_checkup(checkup, launch.plan, as_json=args.json)
            print("\n".join(lines), flush=True)

    result = run_checks(launch.plan, args.backend, args.timeout, on_checkup=show)
    if isinstance(result, NotJoined):
        for problem in result.problems:
            errors.report(f"doctor: rank {result.rank} on {result.host}: {problem}")
        return exitcodes.CHECK_FAILED
    return exitcodes.OK if result.ok else exitcodes.CHECK_FAILED


def render_image(info: Mapping[str, Any] | None) -> list[str]:
    """The image's lines, from its build-info file (None: not in ddpimg's image, no lines):
    its flavour, lock and versions, the DeepSpeed ops built with it, and its lock's notes
    (why its torch or torchvision differ from the other flavours')."""
    if info is None:
        return []
    if "error" in info:
        return [f"image: build-info {info.get('path', '')} {info['error']}"]
    packages = info.get("packages") or {}
    versions = ", ".join(
        f"{name} {packages[name]}"
        for name in ("torch", "torchvision", "deepspeed")
        if packages.get(name)
    )
    lock = (info.get("lock") or {}).get("name")
    ops = info.get("deepspeed_ops") or []
    built = f"; DeepSpeed ops built in: {' '.join(ops)}" if ops else ""
    lines = [f"image: ddpimg {info.get('flavour')} (lock {lock}); {versions}{built}"]
    return lines + [f"image note: {note}" for note in info.get("notes") or []]


def render_checkup(checkup: Checkup, plan: LaunchPlan, as_json: bool = False) -> list[str]:
    """What rank 0 prints: the table, the launch, the all-reduce, the transport, the links,
    every problem, and with ``--json`` the record in one line."""
    floor = plan.site.fabric.min_busbw_gbps
    lines = [
        render_table(checkup.rows),
        f"site {plan.site.name} ({plan.site_reason}); source {plan.topology.source}; "
        f"backend {checkup.backend}; master {checkup.master_addr}:{checkup.master_port}",
        f"all-reduce: {'FAILED' if checkup.ranks_failed else 'correct'}; "
        f"bus bandwidth {checkup.busbw_gbps:.2f} GB/s",
        checkup.transport,
    ]
    if checkup.links:
        lines += render_links(checkup.links, checkup.num_nodes, floor)
    for row in checkup.rows:
        lines += [f"problem: rank {row.rank} on {row.host}: {problem}" for problem in row.problems]
    lines += [f"problem: {problem}" for problem in checkup.verdict.problems]
    if as_json:
        record = {
            "rows": [asdict(row) for row in checkup.rows],
            "busbw_gbps": checkup.busbw_gbps,
            "links": [asdict(link) for link in checkup.links],
            "slow_nodes": list(checkup.verdict.slow_nodes),
            "ok": checkup.ok,
        }
        lines.append(json.dumps(record))
    return lines
