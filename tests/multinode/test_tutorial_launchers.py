"""Two-node launch lines of the origin tutorials on the namespace cluster, JSC naming: the
plain node name resolves to the blocked eth0, only ``nodeNi`` (the profile's ``{node}i``
rule) reaches the fabric ib0.

* Palmetto's helper script: ``srun -N2 bash helper.sh`` with one ``torchrun --rdzv_backend
  c10d`` per node, its endpoint the first node by the profile's master rule (from ``ddpimg
  env``), each running ``train``.
* A Lightning script, ``Trainer(devices=2, num_nodes=2)``, one srun task per device.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engines.netns import NamespaceCluster
from tests.integration.runs import QUICK_TOLERANCE, QUICK_TRAIN, command, run, train_losses
from tests.multinode.conftest import RUN_LIMIT_S, SUFFIX_PROFILE, TIMEOUT_S
from tests.noise import assert_within

pytestmark = [
    pytest.mark.multinode,
    pytest.mark.slurm,
    pytest.mark.torchrun,
    pytest.mark.usefixtures("suffix_naming"),
]

LIGHTNING = Path(__file__).parents[1] / "integration" / "scripts" / "lightning_ddp.py"
# Gradients of 8 MNIST steps cross each node's link: far more than Slurm's own messages.
FABRIC_MIN_BYTES = 8 << 20
MGMT_MAX_BYTES = 2 << 20

# The tutorial's helper script, with the addresses asked of ddpimg instead of `hostname`.
# torchrun's rank-0 agent would give the workers its own FQDN as MASTER_ADDR (node1: the
# blocked eth0): --local_addr gives the fabric name instead. And torchrun guesses which
# agent hosts the c10d store by matching the endpoint against its host name's addresses,
# which node1i (ib0) is not: is_host says it from the node rank ddpimg resolved.
HELPER = """\
#!/bin/bash
set -euo pipefail
read -r master port node_rank node_addr < <(ddpimg env --json --site "$SITE" | python3 -c \\
    'import json, sys; d = json.load(sys.stdin)
print(d["master_addr"], d["master_port"], d["node_rank"], d["node_addr"])')
exec torchrun --nnodes 2 --nproc_per_node 2 --rdzv_id "$SLURM_JOB_ID" \\
    --rdzv_backend c10d --rdzv_endpoint "$master:$port" \\
    --rdzv_conf "is_host=$((node_rank == 0))" --local_addr "$node_addr" \\
    "$(command -v train)" "$@"
"""


def fabric_bytes(cluster: NamespaceCluster) -> dict[tuple[str, str], int]:
    return {
        (node, iface): cluster.interface_bytes(node, iface)
        for node in cluster.node_names[:2]
        for iface in ("eth0", "ib0")
    }


def assert_traffic_on_ib0(
    cluster: NamespaceCluster, before: dict[tuple[str, str], int], fabric_min: int
) -> None:
    after = fabric_bytes(cluster)
    for node in cluster.node_names[:2]:
        fabric = after[node, "ib0"] - before[node, "ib0"]
        mgmt = after[node, "eth0"] - before[node, "eth0"]
        assert fabric > fabric_min, f"{node}: only {fabric} bytes on ib0"
        assert mgmt < MGMT_MAX_BYTES, f"{node}: {mgmt} bytes on eth0"


def test_palmetto_helper_script_one_torchrun_per_node(
    cluster: NamespaceCluster,
    cluster_env: dict[str, str],
    reference_losses: list[float],
    tmp_path: Path,
) -> None:
    helper = tmp_path / "helper.sh"
    helper.write_text(HELPER)
    out = tmp_path / "run"
    env = cluster_env | {"SITE": str(SUFFIX_PROFILE)}
    nodes = ",".join(cluster.node_names[:2])
    before = fabric_bytes(cluster)
    cmd = ["srun", "--nodelist", nodes, "--ntasks-per-node=1", "bash", str(helper),
           *QUICK_TRAIN, "--site", str(SUFFIX_PROFILE), "--timeout", str(TIMEOUT_S),
           "--out", str(out)]  # fmt: skip
    run(cmd, env, timeout=RUN_LIMIT_S)
    assert_traffic_on_ib0(cluster, before, FABRIC_MIN_BYTES)
    assert_within(
        train_losses(out), reference_losses, QUICK_TOLERANCE, "helper script 2 x 2 vs 1 process"
    )
    info = json.loads((out / "manifest.json").read_text())["run_info"]
    assert (info["source"], info["world_size"], info["num_nodes"]) == ("torchrun", 4, 2)


@pytest.mark.lightning
def test_lightning_two_nodes_two_devices_each(
    cluster: NamespaceCluster, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    nodes = ",".join(cluster.node_names[:2])
    before = fabric_bytes(cluster)
    cmd = ["srun", "--nodelist", nodes, "--ntasks-per-node=2", command("train"),
           "--site", str(SUFFIX_PROFILE), "--script", str(LIGHTNING), str(tmp_path), "2", "2",
           "--max-steps", "20"]  # fmt: skip
    run(cmd, cluster_env, timeout=RUN_LIMIT_S)
    reports = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(4)]
    assert [r["global_rank"] for r in reports] == [0, 1, 2, 3]
    assert [r["node_rank"] for r in reports] == [0, 0, 1, 1]
    assert {r["world_size"] for r in reports} == {4}
    assert {r["environment"] for r in reports} == {"SLURMEnvironment"}
    assert {r["steps"] for r in reports} == {20}
    assert len({r["checksum"] for r in reports}) == 1
    assert {r["master"] for r in reports} == {f"{cluster.node_names[0]}i"}
    # A linear model's gradients are small: the ib0 share is checked, not a volume.
    assert_traffic_on_ib0(cluster, before, fabric_min=0)
