"""``ddpimg doctor``: run under the same launcher as ``train``; every rank reports what it
sees, rank 0 prints a table, and the exit status is non-zero when any check fails. The
checks are ``ddpimg.runtime.doctor`` (per rank, gathered) and ``ddpimg.runtime.links`` (each
node's links, on several nodes); this module parses, starts them and prints their result.

``ddpimg doctor --verify`` checks the image instead, in one process and without a launcher:
it recomputes the tree digest of the image's Python environment and ddpimg's files
(``ddpimg.imagetree``) and names every file added, removed or changed since the build (exit
status 4, as any failed check)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from ddpimg import errors, exitcodes, imagetree
from ddpimg.cli.launch import prepare_launch
from ddpimg.cli.launch_options import add_local_rank_argument, add_nproc_argument, add_site_options
from ddpimg.errors import printable
from ddpimg.plan import LaunchPlan
from ddpimg.runtime.doctor import Checkup, NotJoined, RankReport, run_checks
from ddpimg.runtime.links import LINK_BYTES, LINK_ITERATIONS, LinkResult, ring_rounds

# How many paths of each kind (added, removed, changed) --verify names; all are counted.
VERIFY_SHOWN = 50


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_site_options(parser)
    parser.add_argument("--json", action="store_true", help="rank 0 also prints the rows as JSON")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="check the image instead: recompute the tree digest of its Python environment "
        "and ddpimg's files, name what was added, removed or changed since the build",
    )
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
    if args.verify:
        return verify_image(os.environ)
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


def verify_image(env: Mapping[str, str]) -> int:
    """``doctor --verify``: print the verdict; 0 when the tree is the build's, CHECK_FAILED
    when it differs, USAGE when there is no build record (or no tree in it) to check."""
    from ddpimg.buildinfo import BUILD_INFO_DEFAULT, BUILD_INFO_VARIABLE, read_build_info

    where = env.get(BUILD_INFO_VARIABLE) or BUILD_INFO_DEFAULT
    info = read_build_info(env)
    if info is None or "error" in info:
        found = "none" if info is None else info["error"]
        errors.report(
            f"doctor --verify: no readable build record at {where} ({found})",
            hint="--verify checks ddpimg's image from inside it: docker run IMAGE ddpimg doctor "
            "--verify, apptainer exec IMAGE.sif ddpimg doctor --verify",
        )
        return exitcodes.USAGE
    try:
        result = imagetree.verify(info)
    except (ValueError, OSError) as err:
        errors.report(f"doctor --verify: {where}: {err}", hint="rebuild the image (nox -s image)")
        return exitcodes.USAGE
    print("\n".join(render_image(info) + render_verification(result)), flush=True)
    return exitcodes.OK if result.ok else exitcodes.CHECK_FAILED


def render_verification(result: imagetree.Verification, shown: int = VERIFY_SHOWN) -> list[str]:
    """--verify's lines: the verdict with both digests, then each path that differs."""
    roots = " ".join(result.roots)
    beside = (
        [
            f"verify: add-ons mounted beside the image, not in its tree: "
            f"{', '.join(printable(name) for name in result.addons)} ({imagetree.ADDONS_ROOT})"
        ]
        if result.addons
        else []
    )
    if result.ok:
        return [
            f"verify: tree {result.current} ({result.entries} entries under {roots}) is the "
            "build record's",
            *beside,
        ]
    diff = result.diff
    lines = [
        f"verify: FAILED: tree {result.current} ({result.entries} entries under {roots}); the "
        f"build recorded {result.recorded}: {len(diff.added)} added, {len(diff.removed)} "
        f"removed, {len(diff.changed)} changed since the build"
    ]
    for kind, paths in (
        ("added", diff.added),
        ("removed", diff.removed),
        ("changed", diff.changed),
    ):
        lines += [f"verify: {kind}: {printable(path)}" for path in paths[:shown]]
        if len(paths) > shown:
            lines.append(f"verify: ... and {len(paths) - shown} more {kind}")
    return [*lines, *beside]


def render_image(info: Mapping[str, Any] | None) -> list[str]:
    """The image's lines, from its build-info file (None: not in ddpimg's image, no lines):
    its flavour, lock and versions, the DeepSpeed ops built with it, its lock's notes (why
    its torch or torchvision differ from the other flavours') and its tree digest."""
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
    lines += [f"image note: {note}" for note in info.get("notes") or []]
    tree = info.get("tree") or {}
    if isinstance(tree, Mapping) and tree.get("digest"):
        lines.append(f"image tree: {tree['digest']} (`ddpimg doctor --verify` recomputes it)")
    return lines


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
