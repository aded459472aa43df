"""Parsing what scontrol prints (ddpimg.probe.slurm): Slurm 22.05's one-line records."""

from __future__ import annotations

import pytest

from ddpimg.probe.slurm import (
    Node,
    Partition,
    Qos,
    parse_config,
    parse_gres,
    parse_nodes,
    parse_partitions,
    parse_qos,
)

PARTITIONS = (
    "PartitionName=debug AllowGroups=ALL Default=YES QoS=N/A DefaultTime=NONE MaxNodes=UNLIMITED "
    "MaxTime=UNLIMITED MinNodes=0 Nodes=node[1-3] State=UP TotalCPUs=12\n"
    "PartitionName=gpu AllowGroups=ALL Default=NO MaxNodes=8 MaxTime=2-00:00:00 MinNodes=2 "
    "Nodes=node[1-2] State=UP\n"
)
NODES = (
    "NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=64 AvailableFeatures=(null) "
    "ActiveFeatures=(null) Gres=gpu:a100:4(S:0-1) NodeAddr=10.0.0.1 RealMemory=512000 "
    "Partitions=debug,gpu State=IDLE Reason=maintenance done by admin\n"
    "NodeName=node3 CPUTot=32 AvailableFeatures=cpu,amd Gres=(null) RealMemory=256000 "
    "Partitions=debug State=IDLE\n"
)


def test_partitions_with_limits_and_the_default() -> None:
    assert parse_partitions(PARTITIONS) == [
        Partition("debug", "node[1-3]", True, "", 0, 0),
        Partition("gpu", "node[1-2]", False, "2-00:00:00", 8, 2),
    ]


def test_nodes_with_cpus_memory_gpus_and_a_reason_with_spaces() -> None:
    assert parse_nodes(NODES) == [
        Node("node1", 64, 512000, 4, "a100", ("debug", "gpu"), ()),
        Node("node3", 32, 256000, 0, "", ("debug",), ("cpu", "amd")),
    ]


@pytest.mark.parametrize(
    ("gres", "expected"),
    [
        ("gpu:a100:4(S:0-1)", (4, "a100")),
        ("gpu:4", (4, "")),
        ("gpu:v100:2(S:0),gpu:a100:2(S:1),nvme:1", (4, "v100,a100")),
        ("gpu:gh200:4(S:0-3),shard:gh200:16", (4, "gh200")),
        ("(null)", (0, "")),
        ("", (0, "")),
    ],
)
def test_gres_gpu_count_and_types(gres: str, expected: tuple[int, str]) -> None:
    assert parse_gres(gres) == expected


def test_config_lines() -> None:
    text = "Configuration data as of ...\nClusterName             = ddpimgtest\nGresTypes = gpu\n"
    assert parse_config(text) == {"ClusterName": "ddpimgtest", "GresTypes": "gpu"}


def test_qos_with_time_and_node_limits() -> None:
    text = "normal|2-00:00:00|\ndebug|00:30:00|cpu=64,node=2\nlow||\n"
    assert parse_qos(text) == [
        Qos("normal", "2-00:00:00", 0),
        Qos("debug", "00:30:00", 2),
        Qos("low", "", 0),
    ]
