"""`ddpimg doctor` across namespace nodes: every host with its ib0 address and a correct
all-reduce; a profile naming interfaces the nodes lack fails and names them."""

from __future__ import annotations

import re

import pytest

from tests.engines.netns import NamespaceCluster
from tests.integration.runs import command, run
from tests.multinode.conftest import RUN_LIMIT_S, SHORT_NAME_PROFILE, TIMEOUT_S

pytestmark = [pytest.mark.multinode, pytest.mark.slurm, pytest.mark.torchrun]


@pytest.mark.parametrize("nodes", [2, 3])
def test_doctor_shows_every_host_its_ib0_address_and_a_correct_allreduce(
    cluster: NamespaceCluster, cluster_env: dict[str, str], nodes: int
) -> None:
    cmd = ["srun", "-N", str(nodes), "--ntasks-per-node=1", command("ddpimg"), "doctor",
           "--site", str(SHORT_NAME_PROFILE), "--timeout", str(TIMEOUT_S)]  # fmt: skip
    proc = run(cmd, cluster_env, timeout=RUN_LIMIT_S)
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("rank"))
    rows = [line.split() for line in lines[header + 1 : header + 1 + nodes]]
    used = cluster.nodes[:nodes]
    assert [(row[0], row[1]) for row in rows] == [(str(i), n.name) for i, n in enumerate(used)]
    assert [row[6] for row in rows] == [f"ib0={node.fabric_addr}" for node in used]
    assert "site nscluster (--site); source slurm; backend gloo; master node1:" in proc.stdout
    assert "all-reduce: correct" in proc.stdout


def test_doctor_fails_and_names_the_interfaces_a_node_lacks(
    cluster: NamespaceCluster, cluster_env: dict[str, str]
) -> None:
    """Perlmutter's profile (Slingshot hsn0..hsn3) on nodes that have eth0 and ib0."""
    cmd = ["srun", "-N", "2", "--ntasks-per-node=1", command("ddpimg"), "doctor",
           "--site", "perlmutter", "--timeout", str(TIMEOUT_S)]  # fmt: skip
    proc = run(cmd, cluster_env, timeout=RUN_LIMIT_S, check=False)
    assert proc.returncode == 4, proc.stderr
    # Slurm picks the two nodes: node2 and node3 in one run of 2026-11-26, not node1 and node2.
    named = dict(
        re.findall(
            r"ddpimg: error: doctor: rank (\d+) on (\S+): interface hsn0 \(profile perlmutter\) "
            r"does not exist on \2; present: eth0, ib0, lo",
            proc.stderr,
        )
    )
    assert sorted(named) == ["0", "1"], proc.stderr
    assert len(set(named.values())) == 2, proc.stderr
    assert set(named.values()) <= {node.name for node in cluster.nodes}, proc.stderr
