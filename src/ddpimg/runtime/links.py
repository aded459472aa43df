"""Each node's links, measured: on N nodes ``ddpimg doctor`` all-reduces between pairs of
nodes and names the node or the link whose bus bandwidth is below the site's floor
(``fabric.min_busbw_gbps``).

Which pairs: each node with its two neighbours on a ring of the nodes (in rank order):
links (1,2), (2,3), ..., (N,1). Disjoint links run at the same time, so the N links take 2
rounds (N even), 3 (N odd) or 1 (N = 2), whatever N is. Each link is an all-reduce among
all ranks of its two nodes (one process group per link: one group creation, a warm-up, a
barrier and ``LINK_ITERATIONS`` timed all-reduces of ``LINK_BYTES``), then one world
barrier per round and one all-gather of the results. A node whose every link is slow is
the slow one (its NIC, cable, switch port or driver); a slow link between two nodes that
are fast with their other neighbours is the path between them.

Why not all pairs: N(N-1)/2 links in N-1 rounds, a cost that grows with the job, for
little more than the ring tells (every node is still measured against two others). Why not
a bisection (all-reduce over halves of the node set, recursing into the slow half): log2 N
rounds, but each measurement spans many nodes, so one slow node hides behind group size
and congestion, it cannot tell a slow node from a slow link, and two slow nodes in
different halves confuse it. With two nodes there is one link, and which of its ends is
slow cannot be told: a third node can.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpimg.runtime.allreduce import measure_bus_bandwidth

if TYPE_CHECKING:
    import torch

LINK_BYTES = {"cpu": 4 << 20, "cuda": 256 << 20}
LINK_ITERATIONS = 3


def ring_rounds(num_nodes: int) -> list[list[tuple[int, int]]]:
    """The ring's links (node indices), grouped in rounds of disjoint links."""
    if num_nodes < 2:
        return []
    if num_nodes == 2:
        return [[(0, 1)]]
    links = [(i, (i + 1) % num_nodes) for i in range(num_nodes)]
    if num_nodes % 2 == 0:
        return [links[0::2], links[1::2]]
    # Odd: the closing link (N-1, 0) shares a node with the first and the last even link.
    return [links[0 : num_nodes - 1 : 2], links[1 : num_nodes - 1 : 2], [links[-1]]]


@dataclass(frozen=True)
class LinkResult:
    a: str  # host
    b: str
    busbw_gbps: float


@dataclass(frozen=True)
class LinkVerdict:
    """Slow nodes (every link of theirs below the floor), slow links no slow node explains,
    and the problems in words."""

    slow_nodes: tuple[str, ...]
    slow_links: tuple[LinkResult, ...]
    problems: tuple[str, ...]


def judge_links(results: Sequence[LinkResult], floor_gbps: float, site: str) -> LinkVerdict:
    """Which nodes and links are below ``floor_gbps`` (0: nothing is judged)."""
    if not floor_gbps:
        return LinkVerdict((), (), ())
    slow = [link for link in results if link.busbw_gbps < floor_gbps]
    below = f"below site {site}'s fabric.min_busbw_gbps {floor_gbps:g}"
    of_node: dict[str, list[LinkResult]] = {}
    for link in results:
        of_node.setdefault(link.a, []).append(link)
        of_node.setdefault(link.b, []).append(link)
    slow_nodes = [
        host
        for host, links in of_node.items()
        if len(links) >= 2 and all(link in slow for link in links)
    ]
    problems = []
    for host in slow_nodes:
        figures = ", ".join(
            f"{link.busbw_gbps:.3g} GB/s with {link.b if link.a == host else link.a}"
            for link in of_node[host]
        )
        problems.append(
            f"node {host}: all-reduce bus bandwidth {figures}: every link of it is {below}: "
            "its network (NIC, cable, switch port, driver) is slow"
        )
    unexplained = [link for link in slow if link.a not in slow_nodes and link.b not in slow_nodes]
    for link in unexplained:
        if len(of_node) == 2:
            why = "with two nodes the doctor cannot tell which end is slow: run it with a third"
        else:
            why = "both nodes are fast with their other neighbour: the path between them is slow"
        problems.append(
            f"link {link.a} - {link.b}: all-reduce bus bandwidth {link.busbw_gbps:.3g} GB/s, "
            f"{below}; {why}"
        )
    return LinkVerdict(tuple(slow_nodes), tuple(unexplained), tuple(problems))


def measure_links(
    device: torch.device, nodes: Sequence[tuple[str, Sequence[int]]], rank: int
) -> list[LinkResult]:
    """Measure the ring's links (collective: every rank of the world calls this with the
    same ``nodes``: host and ranks of each node, in ring order); every rank gets all
    results, in ring order."""
    import torch.distributed as dist

    kind = "cuda" if device.type == "cuda" else "cpu"
    rounds = ring_rounds(len(nodes))
    # new_group is collective over the whole world: every rank creates every group, in order.
    groups = {}
    for link in (link for round_ in rounds for link in round_):
        ranks = sorted([*nodes[link[0]][1], *nodes[link[1]][1]])
        groups[link] = (ranks, dist.new_group(ranks))
    mine: list[LinkResult] = []
    for round_ in rounds:
        for link in round_:
            ranks, group = groups[link]
            if not isinstance(group, dist.ProcessGroup):
                continue  # not a member: new_group gave a placeholder
            busbw = measure_bus_bandwidth(
                device, len(ranks), group, LINK_BYTES[kind], LINK_ITERATIONS
            )
            if rank == ranks[0]:
                mine.append(LinkResult(nodes[link[0]][0], nodes[link[1]][0], busbw))
        dist.barrier()
    gathered: list[list[LinkResult] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    for _, group in groups.values():
        if isinstance(group, dist.ProcessGroup):
            dist.destroy_process_group(group)
    found = [result for part in gathered for result in part or ()]
    position = {host: index for index, (host, _) in enumerate(nodes)}
    return sorted(found, key=lambda result: position[result.a])
