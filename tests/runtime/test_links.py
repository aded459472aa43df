"""The ring of links ``ddpimg doctor`` measures, its verdict, and a real measurement among
three local ranks standing for three nodes (the links' lines: tests/cli/test_doctor_cmd.py)."""

from __future__ import annotations

import pytest
import torch

from ddpimg.runtime.links import LinkResult, judge_links, measure_links, ring_rounds
from tests.train.ranks import run_ranks


@pytest.mark.parametrize("nodes", [2, 3, 4, 5, 8, 9])
def test_every_node_meets_both_ring_neighbours_in_disjoint_rounds(nodes: int) -> None:
    rounds = ring_rounds(nodes)
    links = [link for round_ in rounds for link in round_]
    expected = {(0, 1)} if nodes == 2 else {(i, (i + 1) % nodes) for i in range(nodes)}
    assert set(links) == expected
    assert len(links) == len(expected)
    for round_ in rounds:
        ends = [node for link in round_ for node in link]
        assert len(ends) == len(set(ends)), f"round {round_} uses a node twice"
    assert len(rounds) == (1 if nodes == 2 else 2 if nodes % 2 == 0 else 3)


def test_one_node_has_no_links() -> None:
    assert ring_rounds(1) == []


def _ring(*figures: float) -> list[LinkResult]:
    hosts = [f"n{i + 1}" for i in range(len(figures))]
    if len(figures) == 1:
        return [LinkResult("n1", "n2", figures[0])]
    return [
        LinkResult(hosts[i], hosts[(i + 1) % len(hosts)], figure)
        for i, figure in enumerate(figures)
    ]


@pytest.mark.parametrize(
    ("links", "slow_nodes", "slow_links", "first_problem"),
    [
        (_ring(0.6, 0.5, 0.7), [], [], None),
        # n2's both links are slow: n2 is named
        (
            _ring(0.01, 0.012, 0.7),
            ["n2"],
            [],
            "node n2: all-reduce bus bandwidth 0.01 GB/s with n1, 0.012 GB/s with n3: every "
            "link of it is below site s's fabric.min_busbw_gbps 0.05: its network (NIC, cable, "
            "switch port, driver) is slow",
        ),
        # one slow link between two nodes that are fast elsewhere
        (
            _ring(0.6, 0.01, 0.7, 0.6),
            [],
            [("n2", "n3")],
            "link n2 - n3: all-reduce bus bandwidth 0.01 GB/s, below site s's "
            "fabric.min_busbw_gbps 0.05; both nodes are fast with their other neighbour: the "
            "path between them is slow",
        ),
        # two nodes: one link, no telling which end
        (
            _ring(0.01),
            [],
            [("n1", "n2")],
            "link n1 - n2: all-reduce bus bandwidth 0.01 GB/s, below site s's "
            "fabric.min_busbw_gbps 0.05; with two nodes the doctor cannot tell which end is "
            "slow: run it with a third",
        ),
    ],
)
def test_judge_links(
    links: list[LinkResult],
    slow_nodes: list[str],
    slow_links: list[tuple[str, str]],
    first_problem: str | None,
) -> None:
    verdict = judge_links(links, 0.05, "s")
    assert list(verdict.slow_nodes) == slow_nodes
    assert [(link.a, link.b) for link in verdict.slow_links] == slow_links
    assert (verdict.problems[0] if verdict.problems else None) == first_problem


def test_without_a_floor_nothing_is_judged() -> None:
    assert judge_links(_ring(0.001, 0.001, 0.001), 0.0, "s").problems == ()


def _measure_three(rank: int) -> None:
    nodes = [("a", [0]), ("b", [1]), ("c", [2])]
    links = measure_links(torch.device("cpu"), nodes, rank)
    assert [(link.a, link.b) for link in links] == [("a", "b"), ("b", "c"), ("c", "a")]
    assert all(link.busbw_gbps > 0 for link in links)


@pytest.mark.torchrun
def test_three_ranks_measure_their_ring() -> None:
    run_ranks(_measure_three, 3)
