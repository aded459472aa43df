"""JSC's naming on the namespace cluster: the plain node name resolves to eth0, which drops
the rendezvous; only ``nodeNi`` is on the fabric. The ``{node}i`` rule works; the plain
``{node}`` rule fails clearly, within the timeout, naming the master and the missing rank."""

from __future__ import annotations

import pytest

from tests.engines.netns import NamespaceCluster
from tests.integration.runs import command, run
from tests.multinode.conftest import (
    FAIL_TIMEOUT_S,
    NO_INTERFACES_PROFILE,
    RUN_LIMIT_S,
    SHORT_NAME_PROFILE,
    SUFFIX_PROFILE,
    TIMEOUT_S,
)

pytestmark = [
    pytest.mark.multinode,
    pytest.mark.slurm,
    pytest.mark.torchrun,
    pytest.mark.usefixtures("suffix_naming"),
]

DOCTOR_2_NODES = ["srun", "-N", "2", "--ntasks-per-node=1"]


def test_suffix_rule_reaches_the_master_over_ib0(
    cluster: NamespaceCluster, cluster_env: dict[str, str]
) -> None:
    cmd = [*DOCTOR_2_NODES, command("ddpimg"), "doctor", "--site", str(SUFFIX_PROFILE),
           "--timeout", str(TIMEOUT_S)]  # fmt: skip
    proc = run(cmd, cluster_env, timeout=RUN_LIMIT_S)
    assert "master node1i:" in proc.stdout
    assert "all-reduce: correct" in proc.stdout


def test_plain_name_rule_fails_within_the_timeout_and_says_why(
    cluster: NamespaceCluster, cluster_env: dict[str, str]
) -> None:
    cmd = [*DOCTOR_2_NODES, command("ddpimg"), "doctor", "--site", str(SHORT_NAME_PROFILE),
           "--timeout", str(FAIL_TIMEOUT_S)]  # fmt: skip
    proc = run(cmd, cluster_env, timeout=RUN_LIMIT_S, check=False)
    assert proc.returncode == 3, proc.stderr
    # node2 cannot reach node1 by its plain name (its eth0 address); rank 0 names node2.
    assert "ddpimg: error: rank 1 could not reach rank 0's rendezvous store at node1:" in (
        proc.stderr
    )
    assert (
        f"ddpimg: error: 1 of 2 ranks never joined the rendezvous within {FAIL_TIMEOUT_S} s: "
        "rank 1 (host node2)"
    ) in proc.stderr


def test_collectives_on_the_blocked_interface_fail_within_the_timeout(
    cluster: NamespaceCluster, cluster_env: dict[str, str]
) -> None:
    cmd = [*DOCTOR_2_NODES, command("ddpimg"), "doctor", "--site", str(NO_INTERFACES_PROFILE),
           "--timeout", str(FAIL_TIMEOUT_S)]  # fmt: skip
    proc = run(cmd, cluster_env, timeout=RUN_LIMIT_S, check=False)
    # Without the deadline Gloo gives up after its own connect timeout (108 s here).
    assert proc.returncode == 3, proc.stderr
    assert (
        "every rank joined the rendezvous, but init_process_group (gloo) did not finish "
        f"within {FAIL_TIMEOUT_S} s"
    ) in proc.stderr
    assert "no GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME set" in proc.stderr
