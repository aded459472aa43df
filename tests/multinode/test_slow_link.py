"""`ddpimg doctor` on three nodes names the node whose ib0 is slowed (a token-bucket rate
limit with tc) and exits with status 4; on healthy links the same check passes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpimg import exitcodes
from tests.engines.netns import NamespaceCluster
from tests.integration.runs import command, run
from tests.multinode.conftest import NUM_NODES, RUN_LIMIT_S, SHORT_NAME_PROFILE, TIMEOUT_S

pytestmark = [pytest.mark.multinode, pytest.mark.slurm, pytest.mark.torchrun]

# Gloo between two namespace nodes reaches about 0.3-1 GB/s of bus bandwidth on a busy
# 2-core machine; 100 Mbit/s out of node2's ib0 holds its links near 0.0125 GB/s. The floor
# sits well between the two.
FLOOR_GBPS = 0.05
RATE = ["tbf", "rate", "100mbit", "burst", "32kbit", "latency", "400ms"]
SLOW = "node2"


@pytest.fixture
def floor_profile(tmp_path: Path) -> Path:
    profile = tmp_path / "nsfloor.toml"
    text = SHORT_NAME_PROFILE.read_text().replace('name = "nscluster"', 'name = "nsfloor"')
    profile.write_text(f"{text}\n[fabric]\nmin_busbw_gbps = {FLOOR_GBPS}\n")
    return profile


@pytest.fixture
def slowed(cluster: NamespaceCluster) -> Iterator[None]:
    """node2's ib0 sends at most 100 Mbit/s for the test (tbf: netem may be absent)."""
    qdisc = ["dev", "ib0", "root"]
    subprocess.run(
        cluster.on_node(SLOW, ["tc", "qdisc", "add", *qdisc, *RATE]), check=True, timeout=30
    )
    try:
        yield
    finally:
        subprocess.run(
            cluster.on_node(SLOW, ["tc", "qdisc", "del", *qdisc]), check=True, timeout=30
        )


def _doctor(env: dict[str, str], profile: Path) -> subprocess.CompletedProcess[str]:
    cmd = ["srun", "-N", str(NUM_NODES), "--ntasks-per-node=1", command("ddpimg"), "doctor",
           "--site", str(profile), "--timeout", str(TIMEOUT_S)]  # fmt: skip
    return run(cmd, env, timeout=RUN_LIMIT_S, check=False)


def test_doctor_names_the_node_whose_link_is_slow(
    cluster: NamespaceCluster, cluster_env: dict[str, str], floor_profile: Path, slowed: None
) -> None:
    proc = _doctor(cluster_env, floor_profile)
    assert proc.returncode == exitcodes.CHECK_FAILED, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert (
        "links: each of 3 nodes with its ring neighbours, 3 round(s) of 3 all-reduces (4 MiB "
        f"on CPUs, 256 MiB on GPUs); floor {FLOOR_GBPS:g} GB/s (fabric.min_busbw_gbps)"
    ) in lines
    slow_links = [line for line in lines if line.endswith("(below the floor)")]
    slow = [line.split(":")[0] for line in slow_links]
    assert slow == ["link node1 - node2", "link node2 - node3"]
    problems = [line for line in lines if line.startswith("problem:")]
    assert len(problems) == 1, proc.stdout
    print(problems[0])  # shown by pytest -rP
    assert problems[0].startswith("problem: node node2: all-reduce bus bandwidth ")
    assert problems[0].endswith(
        f"every link of it is below site nsfloor's fabric.min_busbw_gbps {FLOOR_GBPS:g}: its "
        "network (NIC, cable, switch port, driver) is slow"
    )


def test_doctor_passes_the_same_floor_on_healthy_links(
    cluster: NamespaceCluster, cluster_env: dict[str, str], floor_profile: Path
) -> None:
    proc = _doctor(cluster_env, floor_profile)
    assert proc.returncode == exitcodes.OK, proc.stdout + proc.stderr
    assert "link node3 - node1: bus bandwidth" in proc.stdout
    assert "(below the floor)" not in proc.stdout
