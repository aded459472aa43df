"""DeepSpeed over Open MPI across namespace nodes, the CSC Puhti / Mahti problem.

``mpirun`` runs on the "login node" (the root namespace) and starts its ``orted`` on the
nodes through the cluster's rsh agent, as it would over ssh: the ranks see Open MPI's
variables and no Slurm step, so nothing tells them the host list. DeepSpeed's own discovery
then takes rank 0's ``hostname -I`` (the eth0 address, which drops the traffic) and times
out; ddpimg has rank 0 publish its address by the profile's rule (its short name, which
resolves to ib0) and trains.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.engines.netns import NamespaceCluster
from tests.integration.runs import (
    PYTHON,
    QUICK_TOLERANCE,
    QUICK_TRAIN,
    command,
    run,
    train_losses,
)
from tests.multinode.conftest import (
    FAIL_TIMEOUT_S,
    RUN_LIMIT_S,
    SHORT_NAME_PROFILE,
    TIMEOUT_S,
)
from tests.noise import assert_within

pytestmark = [
    pytest.mark.multinode,
    pytest.mark.mpi,
    pytest.mark.deepspeed,
]

OWN_DISCOVERY = Path(__file__).with_name("deepspeed_own_discovery.py")


def _mpirun(cluster: NamespaceCluster, tmp_path: Path) -> list[str]:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{name} slots=1\n" for name in cluster.node_names[:2]))
    return ["mpirun", "--mca", "plm", "rsh", "--mca", "plm_rsh_agent", str(cluster.rsh_agent),
            "--hostfile", str(hostfile), "-np", "2"]  # fmt: skip


def test_deepspeed_own_discovery_times_out_and_ddpimg_trains(
    cluster: NamespaceCluster,
    deepspeed_env: dict[str, str],
    reference_losses: list[float],
    tmp_path: Path,
) -> None:
    mpirun = _mpirun(cluster, tmp_path)
    # The site's MPI is set up for its fabric, as on a real cluster: MPI's own messages
    # (both discoveries broadcast over MPI) are not what is being tested.
    env = deepspeed_env | {"OMPI_MCA_btl_tcp_if_include": "ib0"}
    master = cluster.nodes[0]

    own = run([*mpirun, PYTHON, str(OWN_DISCOVERY), str(FAIL_TIMEOUT_S)], env,
              timeout=RUN_LIMIT_S, check=False)  # fmt: skip
    assert own.returncode != 0, own.stdout + own.stderr
    outcomes = re.findall(r"own discovery: rank (\d) MASTER_ADDR=(\S+) (failed|worked)", own.stdout)
    # Both ranks got rank 0's first `hostname -I` address, eth0's, and both failed.
    assert sorted(outcomes) == [
        ("0", master.mgmt_addr, "failed"),
        ("1", master.mgmt_addr, "failed"),
    ]
    assert f"connect to ({master.mgmt_addr}, 29500)" in own.stdout

    out = tmp_path / "out"
    site = ["--site", str(SHORT_NAME_PROFILE), "--timeout", str(TIMEOUT_S)]
    cmd = [*mpirun, command("train"), "--strategy", "deepspeed", *QUICK_TRAIN, *site,
           "--out", str(out)]  # fmt: skip
    run(cmd, env, timeout=RUN_LIMIT_S)
    assert_within(
        train_losses(out),
        reference_losses,
        QUICK_TOLERANCE,
        "DeepSpeed over mpirun, 2 nodes",
    )
