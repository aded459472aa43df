"""The shared consistency check: every rule, and how it names the fields' origins."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ddpimg.errors import LauncherError
from ddpimg.topology.consistency import check_topology
from ddpimg.topology.model import Topology

GOOD = Topology(
    source="test",
    rank=3,
    world_size=4,
    local_rank=1,
    local_world_size=2,
    node_rank=1,
    num_nodes=2,
    hosts=("n1", "n2"),
    tasks_per_node=(2, 2),
)
ORIGIN = {
    "rank": "MY_RANK",
    "world_size": "MY_SIZE",
    "local_rank": "MY_LOCAL",
    "local_world_size": "MY_LOCAL_SIZE",
    "node_rank": "MY_NODE",
    "num_nodes": "MY_SIZE / MY_LOCAL_SIZE",
    "hosts": "MY_HOSTS",
    "tasks_per_node": "MY_TASKS",
}
ENV = {
    "MY_RANK": "3",
    "MY_SIZE": "4",
    "MY_LOCAL": "1",
    "MY_LOCAL_SIZE": "2",
    "MY_NODE": "1",
    "MY_HOSTS": "n[1-2]",
    "MY_TASKS": "2(x2)",
}


def test_consistent_topology_is_returned_unchanged() -> None:
    assert check_topology(GOOD, ORIGIN, ENV) is GOOD


def test_unknown_hosts_and_tasks_are_not_checked() -> None:
    topology = dataclasses.replace(GOOD, hosts=(), tasks_per_node=())
    assert check_topology(topology, ORIGIN, ENV) is topology


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"world_size": 0}, r"^test: world size 0 \(from MY_SIZE\) must be at least 1"),
        ({"local_world_size": 0}, r"^test: local world size 0 \(from MY_LOCAL_SIZE\) must be"),
        ({"num_nodes": 0}, r"^test: node count 0 \(from MY_SIZE / MY_LOCAL_SIZE\) must be"),
        ({"rank": -1}, r"^test: rank -1 \(from MY_RANK\) must not be negative"),
        ({"local_rank": -1}, r"^test: local rank -1 \(from MY_LOCAL\) must not be negative"),
        ({"node_rank": -1}, r"^test: node rank -1 \(from MY_NODE\) must not be negative"),
        ({"rank": 4}, r"^test: rank 4 \(from MY_RANK\) is not below MY_SIZE=4"),
        ({"local_rank": 2}, r"^test: local rank 2 \(from MY_LOCAL\) is not below MY_LOCAL_SIZE=2"),
        (
            {"node_rank": 2},
            r"^test: node rank 2 \(from MY_NODE\) is not below node count 2 "
            r"\(from MY_SIZE / MY_LOCAL_SIZE\)",
        ),
        (
            {"local_world_size": 8, "local_rank": 1},
            r"^test: local world size 8 \(from MY_LOCAL_SIZE\) is larger than MY_SIZE=4",
        ),
        (
            {"num_nodes": 5, "hosts": (), "tasks_per_node": ()},
            r"^test: node count 5 \(from MY_SIZE / MY_LOCAL_SIZE\) is larger than MY_SIZE=4",
        ),
        ({"hosts": ("n1",)}, r"^test: MY_HOSTS=n\[1-2\] names 1 node but node count 2"),
        (
            {"tasks_per_node": (2, 1, 1)},
            r"^test: MY_TASKS=2\(x2\) covers 3 nodes but node count 2",
        ),
        ({"tasks_per_node": (2, 3)}, r"^test: MY_TASKS=2\(x2\) adds up to 5 tasks but MY_SIZE=4"),
        (
            {"tasks_per_node": (3, 1)},
            r"^test: MY_TASKS=2\(x2\) gives 1 task to node MY_NODE=1 but MY_LOCAL_SIZE=2",
        ),
    ],
)
def test_each_rule_names_the_fields_that_disagree(changes: dict[str, Any], message: str) -> None:
    # The values in ENV stay those of GOOD: a field shows VARIABLE=value only when the
    # environment holds that value, otherwise the topology's value and its origin.
    topology = dataclasses.replace(GOOD, **changes)
    with pytest.raises(LauncherError, match=message) as caught:
        check_topology(topology, ORIGIN, _env_matching(topology))
    assert caught.value.hint is not None
    assert "must agree" in caught.value.hint


def test_fields_without_origin_show_their_value() -> None:
    with pytest.raises(LauncherError) as caught:
        check_topology(dataclasses.replace(GOOD, rank=4), {}, {})
    assert caught.value.message == "test: rank 4 is not below world size 4"


def _env_matching(topology: Topology) -> dict[str, str]:
    """ENV without the variables whose value the test changed in the topology."""
    changed = {
        ORIGIN[field]
        for field in ORIGIN
        if field not in ("hosts", "tasks_per_node")
        and getattr(topology, field) != getattr(GOOD, field)
    }
    return {key: value for key, value in ENV.items() if key not in changed}
