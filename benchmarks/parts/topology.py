"""``resolve_topology`` + ``derive_port`` for simulated Slurm steps of 64 to 10,000 nodes x 8
tasks, per rank, over sampled ranks of a fragmented node list."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence
from typing import Any

from parts.common import Row, spread

TASKS_PER_NODE = 8
SAMPLED_RANKS = 200


def compress_nid(indices: Sequence[int]) -> str:
    """``nid[000001-000006,000008-...]`` for sorted ``indices``, as Slurm writes it."""
    parts, start, prev = [], indices[0], indices[0]
    for index in [*indices[1:], None]:
        if index is not None and index == prev + 1:
            prev = index
            continue
        parts.append(f"{start:06d}" if start == prev else f"{start:06d}-{prev:06d}")
        if index is not None:
            start = prev = index
    return f"nid[{','.join(parts)}]"


def slurm_step_env(nodes: int, rank: int, nodelist: str) -> dict[str, str]:
    """The variables srun gives task ``rank`` of a ``nodes`` x 8 step."""
    world = nodes * TASKS_PER_NODE
    return {
        "SLURM_JOB_ID": "4242424",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_STEP_NUM_NODES": str(nodes),
        "SLURM_NTASKS": str(world),
        "SLURM_STEP_NUM_TASKS": str(world),
        "SLURM_TASKS_PER_NODE": f"{TASKS_PER_NODE}(x{nodes})",
        "SLURM_STEP_TASKS_PER_NODE": f"{TASKS_PER_NODE}(x{nodes})",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank % TASKS_PER_NODE),
        "SLURM_NODEID": str(rank // TASKS_PER_NODE),
    }


def run(node_counts: Sequence[int]) -> tuple[list[Row], dict[str, Any]]:
    from ddpimg.topology import derive_port, expand_hostlist, resolve_topology

    rows: list[Row] = []
    record: dict[str, Any] = {}
    rng = random.Random(0)
    for nodes in node_counts:
        # A fragmented allocation: every 7th node of the machine is taken by someone else.
        indices = [i for i in range(nodes * 7 // 6 + 7) if i % 7 != 3][:nodes]
        nodelist = compress_nid(indices)
        world = nodes * TASKS_PER_NODE
        ranks = sorted(rng.sample(range(world), min(SAMPLED_RANKS, world)))
        per_rank = []
        for rank in ranks:
            env = slurm_step_env(nodes, rank, nodelist)
            began = time.perf_counter()
            topology = resolve_topology(env)
            derive_port(topology.job_key, (20000, 29999))
            per_rank.append(time.perf_counter() - began)
        began = time.perf_counter()
        expand_hostlist(nodelist)
        expand_s = time.perf_counter() - began
        median = statistics.median(per_rank)
        record[str(nodes)] = {
            "ranks": world,
            "nodelist_chars": len(nodelist),
            "sampled_ranks": len(ranks),
            "per_rank_s": spread(per_rank),
            "expand_hostlist_s": expand_s,
        }
        rows.append(
            (
                f"topology resolution, {nodes} nodes x {TASKS_PER_NODE} = {world} ranks "
                f"(nodelist {len(nodelist)} chars)",
                f"median {median * 1e3:.2f} ms per rank (max {max(per_rank) * 1e3:.2f}); "
                f"hostlist expansion alone {expand_s * 1e3:.2f} ms",
                "< 10 ms at 4,096 nodes" if nodes == 4096 else "",
            )
        )
    return rows, record
