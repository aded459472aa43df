"""`ddpimg site probe` drafts a profile for the namespace cluster, a cluster ddpimg has no
profile for: JSC-like naming (the plain node name resolves to eth0, whose traffic between
nodes is dropped; ``nodeNi`` to ib0), and a slurm.conf declaring GPU GRES of type a100 and a
second partition. The draft must choose ib0, the ``{node}i`` rule, the partitions and the GPU
type, every value citing how it was found; ``ddpimg doctor`` with it passes, and a 2-node
`train` with it has one process's losses, where `generic` (the plain node name) fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.site import load_profile
from ddpimg.site.sources import source_of, uncited
from tests.engines.netns import NamespaceCluster
from tests.integration.runs import QUICK_TOLERANCE, QUICK_TRAIN, command, run, train_losses
from tests.multinode.conftest import (
    DECLARED,
    FAIL_TIMEOUT_S,
    RUN_LIMIT_S,
    TIMEOUT_S,
)
from tests.noise import assert_within

pytestmark = [
    pytest.mark.multinode,
    pytest.mark.slurm,
    pytest.mark.torchrun,
    pytest.mark.usefixtures("suffix_naming"),
]

TWO_NODES = ["srun", "--nodelist", "node1,node2"]
# A hang guard for the probe's wait for the other task: both started within seconds here.
PROBE_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def draft(cluster: NamespaceCluster, cluster_env: dict[str, str],
          tmp_path_factory: pytest.TempPathFactory) -> Path:  # fmt: skip
    """The profile the probe drafts, run as one task on each of two nodes."""
    path = tmp_path_factory.mktemp("probe") / "nsprobed.toml"
    with cluster.short_names("eth0"):
        probe = [*TWO_NODES, "--ntasks-per-node=1", command("ddpimg"), "site", "probe",
                 "--out", str(path), "--timeout", str(PROBE_TIMEOUT_S)]  # fmt: skip
        run(probe, cluster_env, timeout=RUN_LIMIT_S)
    return path


def test_the_draft_chooses_the_working_interface_rule_partitions_and_gpu_type(
    draft: Path, cluster: NamespaceCluster
) -> None:
    profile = load_profile(draft)
    assert profile.name == "nsprobed"
    assert profile.interfaces == ("ib0",)
    assert profile.master_addr == "{node}i"
    assert profile.match.slurm_cluster_names == ("ddpimgtest",)
    declared = [name for name, _ in DECLARED.partitions]
    assert [name for name, _ in profile.partitions] == sorted(["debug", *declared])
    assert dict(profile.partitions)["long"].max_time == "2-00:00:00"
    assert profile.job.partition == "debug"  # the default partition, whose nodes have GPUs
    assert (profile.job.gpus_per_node, profile.job.gpu_type) == (2, "a100")
    assert cluster.slurm is not None
    assert profile.job.cpus_per_task == cluster.slurm.cpus // 2
    # Every value says how it was found; the network ones by the measurement.
    assert uncited(profile, profile.facts) == []
    interfaces = source_of(profile, "network.interfaces")
    assert interfaces.startswith("probed: ")
    assert "node2 -> node1 eth0 (" in interfaces
    assert "timed out" in interfaces
    assert "node2 -> node1 ib0 (" in interfaces
    master = source_of(profile, "network.master_addr")
    assert "{node}: node1 -> node2: " in master
    assert "{node}i: node1 -> node2i: " in master
    assert source_of(profile, "hardware.build").startswith("unverified: no GPU visible")


def test_doctor_proves_the_draft_on_two_nodes(
    draft: Path, cluster: NamespaceCluster, cluster_env: dict[str, str]
) -> None:
    with cluster.short_names("eth0"):
        doctor = [*TWO_NODES, "--ntasks-per-node=1", command("ddpimg"), "doctor",
                  "--site", str(draft), "--timeout", str(TIMEOUT_S)]  # fmt: skip
        proc = run(doctor, cluster_env, timeout=RUN_LIMIT_S)
    assert "master node1i:" in proc.stdout
    assert "all-reduce: correct" in proc.stdout


def test_two_nodes_train_with_the_draft_as_one_process_where_generic_fails(
    draft: Path,
    cluster: NamespaceCluster,
    cluster_env: dict[str, str],
    reference_losses: list[float],
    tmp_path: Path,
) -> None:
    train = [*TWO_NODES, "--ntasks-per-node=2", command("train"), *QUICK_TRAIN]
    with cluster.short_names("eth0"):
        out = tmp_path / "drafted"
        run([*train, "--site", str(draft), "--timeout", str(TIMEOUT_S), "--out", str(out)],
            cluster_env, timeout=RUN_LIMIT_S)  # fmt: skip
        generic_run = [*train, "--site", "generic", "--timeout", str(FAIL_TIMEOUT_S),
                       "--out", str(tmp_path / "generic")]  # fmt: skip
        generic = run(generic_run, cluster_env, timeout=RUN_LIMIT_S, check=False)
    assert_within(
        train_losses(out), reference_losses, QUICK_TOLERANCE, "drafted profile, 2 nodes x 2 ranks"
    )
    assert generic.returncode == 3, generic.stderr
    assert "could not reach rank 0's rendezvous store at node1:" in generic.stderr


def test_on_the_login_node_slurm_is_read_and_the_network_is_a_question(
    cluster: NamespaceCluster, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    """Without tasks on other nodes the probe reads Slurm and marks what only two nodes can
    tell as unverified, with the question and the command that measures it."""
    path = tmp_path / "nslogin.toml"
    run([command("ddpimg"), "site", "probe", "--out", str(path)], cluster_env, timeout=120)
    profile = load_profile(path)
    assert (profile.job.gpus_per_node, profile.job.gpu_type) == (2, "a100")
    assert "long" in dict(profile.partitions)
    assert source_of(profile, "network.master_addr").startswith(
        "unverified: not measured (the probe ran on one node); run `srun -N2 "
        "--ntasks-per-node 1 ddpimg site probe"
    )
    assert uncited(profile, profile.facts) == []
