"""Training across namespace nodes: the same per-step losses as one process, with the
collective traffic on ib0 (eth0 would drop it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engines.netns import NamespaceCluster
from tests.integration.runs import QUICK_TOLERANCE, QUICK_TRAIN, command, run, train_losses
from tests.multinode.conftest import RUN_LIMIT_S, SHORT_NAME_PROFILE, TIMEOUT_S
from tests.noise import assert_within

pytestmark = [pytest.mark.multinode, pytest.mark.slurm, pytest.mark.torchrun]

# The MNIST CNN has about 1.2 M parameters: every step all-reduces about 4.8 MB of
# gradients, a good part of which crosses each node's link. 8 steps move far more than this
# over ib0, while Slurm's own messages and the tasks' output on eth0 stay far below it.
FABRIC_MIN_BYTES = 8 << 20
MGMT_MAX_BYTES = 2 << 20


def _train_on_two_nodes(
    cluster: NamespaceCluster,
    env: dict[str, str],
    tasks_per_node: int,
    out: Path,
    *train_args: str,
) -> list[float]:
    """Run QUICK_TRAIN with ``srun`` on node1 and node2; check where the bytes went."""
    names = cluster.node_names[:2]
    ifaces = ("eth0", "ib0")
    before = {(n, i): cluster.interface_bytes(n, i) for n in names for i in ifaces}
    srun = ["srun", "--nodelist", ",".join(names), f"--ntasks-per-node={tasks_per_node}"]
    cmd = [*srun, command("train"), *QUICK_TRAIN, *train_args, "--site", str(SHORT_NAME_PROFILE),
           "--timeout", str(TIMEOUT_S), "--out", str(out)]  # fmt: skip
    run(cmd, env, timeout=RUN_LIMIT_S)
    for name in names:
        fabric = cluster.interface_bytes(name, "ib0") - before[name, "ib0"]
        mgmt = cluster.interface_bytes(name, "eth0") - before[name, "eth0"]
        assert fabric > FABRIC_MIN_BYTES, f"{name}: only {fabric} bytes on ib0"
        assert mgmt < MGMT_MAX_BYTES, f"{name}: {mgmt} bytes on eth0"
    return train_losses(out)


def test_four_ranks_on_two_nodes_match_one_process(
    cluster: NamespaceCluster,
    cluster_env: dict[str, str],
    reference_losses: list[float],
    tmp_path: Path,
) -> None:
    """Della's pattern (one srun task per GPU) on a network like Puhti's."""
    losses = _train_on_two_nodes(cluster, cluster_env, 2, tmp_path)
    assert_within(losses, reference_losses, QUICK_TOLERANCE, "4 ranks on 2 nodes vs 1 process")


def test_torchrun_per_node_matches_one_process(
    cluster: NamespaceCluster,
    cluster_env: dict[str, str],
    reference_losses: list[float],
    tmp_path: Path,
) -> None:
    """Palmetto's and JSC's pattern: one task per node, each starting 2 local workers."""
    losses = _train_on_two_nodes(cluster, cluster_env, 1, tmp_path, "--nproc-per-node", "2")
    assert_within(losses, reference_losses, QUICK_TOLERANCE, "torchrun 2 x 2 vs 1 process")
