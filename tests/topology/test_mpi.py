"""Ranks from MPI launchers: mpirun / mpiexec, and srun starting MPI ranks directly."""

from __future__ import annotations

import pytest

from ddpimg.errors import LauncherError
from ddpimg.topology import resolve_with
from ddpimg.topology.model import Topology
from ddpimg.topology.mpi import MPICH, MVAPICH, OPENMPI, PALS, PMIX, MpiSource
from tests.topology import envs

ALL = (OPENMPI, MVAPICH, MPICH, PALS, PMIX)

MVAPICH_RSH = envs.SHELL | {
    "MV2_COMM_WORLD_RANK": "5",
    "MV2_COMM_WORLD_SIZE": "8",
    "MV2_COMM_WORLD_LOCAL_RANK": "1",
    "MV2_COMM_WORLD_LOCAL_SIZE": "4",
}
# Intel MPI's mpiexec.hydra (MPICH's Hydra sets the same PMI_* and MPI_LOCAL* variables).
HYDRA = envs.SHELL | {
    "PMI_RANK": "6",
    "PMI_SIZE": "8",
    "PMI_FD": "6",
    "MPI_LOCALRANKID": "2",
    "MPI_LOCALNRANKS": "4",
    "I_MPI_ROOT": "/opt/intel/oneapi/mpi/2021.10.0",
}
# HPE Cray PALS mpiexec under PBS (ALCF Polaris): PALS_* plus Cray PMI's PMI_*.
PALS_MPIEXEC = envs.SHELL | {
    "PALS_RANKID": "5",
    "PALS_LOCAL_RANKID": "1",
    "PALS_NODEID": "1",
    "PALS_DEPTH": "8",
    "PALS_APID": "8d7e3a4c-polaris",
    "PALS_APINFO": "/var/run/palsd/8d7e3a4c/apinfo",
    "PMI_RANK": "5",
    "PMI_SIZE": "8",
    "PMI_LOCAL_RANK": "1",
    "PMI_LOCAL_SIZE": "4",
    "PBS_JOBID": "123456.polaris-pbs-01",
}
# srun --mpi=pmi2 (Slurm's plugin exports exactly these PMI variables).
PMI2 = {"PMI_FD": "17", "PMI_JOBID": "4242.0", "PMI_SPAWNED": "0"}
# srun --mpi=cray_shasta (Perlmutter, LUMI): PALS identifiers, no sizes.
SHASTA = {
    "PALS_APID": "4242.0",
    "PALS_APINFO": "/var/spool/slurmd/mpi_cray_shasta/4242.0/apinfo",
    "PALS_SPOOL_DIR": "/var/spool/slurmd/mpi_cray_shasta/4242.0",
    "PMI_CONTROL_PORT": "63001,63002",
}


def without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {key: value for key, value in env.items() if key not in names}


@pytest.mark.parametrize(
    ("env", "detected_by"),
    [
        (envs.ompi(0), {"openmpi", "pmix"}),
        (MVAPICH_RSH, {"mvapich"}),
        (HYDRA, {"mpich"}),
        (PALS_MPIEXEC, {"pals"}),
        (envs.srun(0) | PMI2 | {"PMI_RANK": "0", "PMI_SIZE": "4"}, {"mpich"}),
        (envs.srun(0) | SHASTA | {"PALS_RANKID": "0", "PALS_NODEID": "0"}, {"pals"}),
        (envs.srun(0) | {"PMIX_RANK": "0"}, {"pmix"}),
        (envs.srun(0), set()),
        (envs.torchrun(0), set()),
        (envs.SHELL, set()),
    ],
    ids=[
        "openmpi",
        "mvapich",
        "hydra",
        "pals-mpiexec",
        "srun-pmi2",
        "srun-cray-shasta",
        "srun-pmix",
        "srun",
        "torchrun",
        "shell",
    ],
)
def test_detection(env: dict[str, str], detected_by: set[str]) -> None:
    # The detection order in ddpimg.topology decides between several matches (openmpi first).
    assert {source.name for source in ALL if source.detect(env)} == detected_by


@pytest.mark.parametrize(
    ("rank", "node_rank"),
    [(0, 0), (1, 0), (2, 1), (3, 1)],
)
def test_mpirun_derives_nodes_from_local_size(rank: int, node_rank: int) -> None:
    assert resolve_with(OPENMPI, envs.ompi(rank)) == Topology(
        source="openmpi",
        rank=rank,
        world_size=4,
        local_rank=rank % 2,
        local_world_size=2,
        node_rank=node_rank,
        num_nodes=2,
        hosts=(),
        tasks_per_node=(),
        master_node="",
        master_addr_explicit=False,
        master_port=None,
        job_key="2076704769",
        job_id="",
        master_via_mpi=True,
    )


def test_node_count_rounds_up_for_a_partial_last_node() -> None:
    env = envs.ompi(4, size=5, local_size=4) | {"OMPI_COMM_WORLD_LOCAL_RANK": "0"}
    topology = resolve_with(OPENMPI, env)
    assert (topology.node_rank, topology.num_nodes) == (1, 2)


@pytest.mark.parametrize(
    "slurm",
    [
        envs.sbatch(),
        # Ranks on other nodes run under mpirun's daemons, which srun started as one step.
        envs.srun(0, ntasks=1, nnodes=1, nodelist="della-i14g2", tasks_per_node="1"),
        envs.srun(1, ntasks=2, tasks_per_node="1(x2)"),
    ],
    ids=["batch-script", "daemon-step", "daemon-step-other-node"],
)
def test_mpirun_inside_an_allocation_ignores_the_daemons_slurm_ids(slurm: dict[str, str]) -> None:
    topology = resolve_with(OPENMPI, slurm | envs.ompi(3))
    assert (topology.rank, topology.world_size, topology.node_rank) == (3, 4, 1)
    assert topology.hosts == ()
    assert topology.master_node == ""
    assert topology.job_key == "2076704769"
    assert topology.job_id == "4242"


def test_rank_equal_to_procid_by_chance_is_not_a_direct_launch() -> None:
    # Rank 0 under a one-daemon step: SLURM_PROCID matches, the task count does not.
    slurm = envs.srun(0, ntasks=1, nnodes=1, nodelist="della-i14g1", tasks_per_node="1")
    assert resolve_with(OPENMPI, slurm | envs.ompi(0)).hosts == ()


@pytest.mark.parametrize(
    ("source", "env", "expected"),
    [
        (MVAPICH, MVAPICH_RSH, (5, 8, 1, 4, 1, 2, "")),
        (MVAPICH, MVAPICH_RSH | {"SLURM_JOB_ID": "4242"}, (5, 8, 1, 4, 1, 2, "4242")),
        (MPICH, HYDRA, (6, 8, 2, 4, 1, 2, "")),
        (PALS, PALS_MPIEXEC, (5, 8, 1, 4, 1, 2, "8d7e3a4c-polaris")),
        # PALS_NODEID is the node index even when placement is not by slot.
        (PALS, PALS_MPIEXEC | {"PALS_NODEID": "0"}, (5, 8, 1, 4, 0, 2, "8d7e3a4c-polaris")),
        (PALS, without(PALS_MPIEXEC, "PALS_NODEID"), (5, 8, 1, 4, 1, 2, "8d7e3a4c-polaris")),
    ],
    ids=["mvapich", "mvapich-in-slurm-job", "hydra", "pals", "pals-node-id", "pals-no-node-id"],
)
def test_mpiexec_flavours(
    source: MpiSource, env: dict[str, str], expected: tuple[int, int, int, int, int, int, str]
) -> None:
    topology = resolve_with(source, env)
    assert (
        topology.rank,
        topology.world_size,
        topology.local_rank,
        topology.local_world_size,
        topology.node_rank,
        topology.num_nodes,
        topology.job_key,
    ) == expected
    assert topology.source == source.name
    assert (topology.hosts, topology.master_node) == ((), "")


def test_pals_job_id_comes_from_pbs() -> None:
    assert resolve_with(PALS, PALS_MPIEXEC).job_id == "123456.polaris-pbs-01"


@pytest.mark.parametrize(
    ("source", "mpi"),
    [
        (MPICH, PMI2 | {"PMI_RANK": "3", "PMI_SIZE": "4"}),
        (PALS, SHASTA | {"PALS_RANKID": "3", "PALS_NODEID": "1"}),
        (PMIX, {"PMIX_RANK": "3", "PMIX_NAMESPACE": "slurm.pmix.4242.0"}),
    ],
    ids=["srun-pmi2", "srun-cray-shasta", "srun-pmix"],
)
def test_ranks_started_by_srun_take_hosts_from_the_step(
    source: MpiSource, mpi: dict[str, str]
) -> None:
    assert resolve_with(source, envs.srun(3) | mpi) == Topology(
        source=source.name,
        rank=3,
        world_size=4,
        local_rank=1,
        local_world_size=2,
        node_rank=1,
        num_nodes=2,
        hosts=("della-i14g1", "della-i14g2"),
        tasks_per_node=(2, 2),
        master_node="della-i14g1",
        job_key="4242.0",
        job_id="4242",
        master_via_mpi=True,
        rank_is_task=True,
    )


def test_ranks_started_by_srun_keep_the_launchers_local_variables() -> None:
    env = envs.srun(3) | PMI2 | {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1"}
    assert resolve_with(MPICH, env).local_rank == 1


@pytest.mark.parametrize(
    ("env", "source"),
    [
        (envs.ompi(2), OPENMPI),
        (envs.srun(2) | {"PMIX_RANK": "2"}, PMIX),
    ],
    ids=["mpirun", "srun-pmix"],
)
def test_exported_master_addr_and_port_win(env: dict[str, str], source: MpiSource) -> None:
    topology = resolve_with(source, env | {"MASTER_ADDR": "della-i14g1-ib", "MASTER_PORT": "23456"})
    assert (topology.master_node, topology.master_addr_explicit) == ("della-i14g1-ib", True)
    assert topology.master_port == 23456


@pytest.mark.parametrize(
    ("source", "env", "message"),
    [
        (
            PMIX,
            envs.SHELL | {"PMIX_RANK": "2", "PMIX_NAMESPACE": "prterun-x-1@1"},
            r"^pmix: PMIX_RANK=2 is set, but pmix puts no world size in the environment and "
            r"this is not a Slurm step \(SLURM_STEP_ID is not set\)",
        ),
        (
            PMIX,
            envs.srun(0) | {"PMIX_RANK": "2"},
            r"^pmix: PMIX_RANK=2 is set, .* this Slurm step's SLURM_PROCID=0 is not this rank, "
            r"so srun did not start the ranks",
        ),
        (
            OPENMPI,
            without(envs.ompi(1), "OMPI_COMM_WORLD_LOCAL_SIZE"),
            r"^openmpi: OMPI_COMM_WORLD_LOCAL_SIZE is not set",
        ),
        (
            OPENMPI,
            without(envs.ompi(1), "OMPI_COMM_WORLD_SIZE"),
            r"OMPI_COMM_WORLD_SIZE is not set",
        ),
        (
            OPENMPI,
            envs.ompi(1) | {"OMPI_COMM_WORLD_LOCAL_RANK": ""},
            r"^openmpi: OMPI_COMM_WORLD_LOCAL_RANK is set but empty",
        ),
        (
            OPENMPI,
            envs.ompi(1) | {"OMPI_COMM_WORLD_RANK": "one"},
            r"^openmpi: OMPI_COMM_WORLD_RANK=one is not a whole number",
        ),
        (
            OPENMPI,
            envs.ompi(1) | {"OMPI_COMM_WORLD_LOCAL_SIZE": "0"},
            r"^openmpi: OMPI_COMM_WORLD_LOCAL_SIZE=0 must be at least 1",
        ),
        (
            OPENMPI,
            envs.ompi(1) | {"OMPI_COMM_WORLD_RANK": "4"},
            r"^openmpi: OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4",
        ),
        (
            OPENMPI,
            envs.ompi(1) | {"OMPI_COMM_WORLD_LOCAL_SIZE": "8"},
            r"^openmpi: OMPI_COMM_WORLD_LOCAL_SIZE=8 is larger than OMPI_COMM_WORLD_SIZE=4",
        ),
        (
            PALS,
            PALS_MPIEXEC | {"PALS_NODEID": "2"},
            r"^pals: PALS_NODEID=2 is not below node count 2 "
            r"\(from PMI_SIZE / PMI_LOCAL_SIZE, rounded up\)",
        ),
        (
            PALS,
            envs.SHELL | SHASTA | {"PALS_RANKID": "3", "PALS_NODEID": "1"},
            r"^pals: PMI_SIZE is not set",
        ),
        (
            MPICH,
            envs.srun(3) | PMI2 | {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALNRANKS": "4"},
            r"^mpich: SLURM_STEP_TASKS_PER_NODE=2\(x2\) gives 2 tasks to node SLURM_NODEID=1 "
            r"but MPI_LOCALNRANKS=4",
        ),
        (
            OPENMPI,
            envs.ompi(1) | {"MASTER_PORT": "65536"},
            r"^openmpi: MASTER_PORT=65536 is not a TCP port",
        ),
    ],
    ids=[
        "pmix-without-step",
        "pmix-step-of-another-rank",
        "missing-local-size",
        "missing-world-size",
        "empty-local-rank",
        "malformed-rank",
        "zero-local-size",
        "rank-beyond-world",
        "local-size-beyond-world",
        "node-id-beyond-nodes",
        "cray-shasta-outside-a-step",
        "local-size-contradicts-step",
        "bad-master-port",
    ],
)
def test_errors_name_variables_and_values(
    source: MpiSource, env: dict[str, str], message: str
) -> None:
    with pytest.raises(LauncherError, match=message) as caught:
        resolve_with(source, env)
    err = caught.value
    assert err.hint, "every launcher error says what to do"
    assert str(err) == f"{err.message}\n  hint: {err.hint}"
