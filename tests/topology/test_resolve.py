"""resolve_topology: the detection order, the batch-script guard, and purity."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ddpimg.errors import HostlistError, LauncherError
from ddpimg.topology import RANK_SOURCES, detect_source, resolve_topology
from tests.topology import envs

SRUN_PMIX = {"PMIX_RANK": "3", "PMIX_NAMESPACE": "slurm.pmix.4242.0"}
HYDRA = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
MVAPICH = {
    "MV2_COMM_WORLD_RANK": "3",
    "MV2_COMM_WORLD_SIZE": "4",
    "MV2_COMM_WORLD_LOCAL_RANK": "1",
    "MV2_COMM_WORLD_LOCAL_SIZE": "2",
}
PALS = {
    "PALS_RANKID": "3",
    "PALS_LOCAL_RANKID": "1",
    "PALS_NODEID": "1",
    "PMI_RANK": "3",
    "PMI_SIZE": "4",
    "PMI_LOCAL_RANK": "1",
    "PMI_LOCAL_SIZE": "2",
}


def test_detection_order_is_the_documented_one() -> None:
    assert [source.name for source in RANK_SOURCES] == [
        "torchrun",
        "env",
        "openmpi",
        "mvapich",
        "mpich",
        "pals",
        "pmix",
        "slurm",
        "single",
    ]


@pytest.mark.parametrize(
    ("env", "source", "rank", "hosts_known"),
    [
        (envs.SHELL, "single", 0, False),
        (envs.sbatch(ntasks=1, nnodes=1, nodelist="della-i14g1"), "single", 0, False),
        (envs.srun(3), "slurm", 3, True),
        (envs.torchrun(3), "torchrun", 3, False),
        # srun -N2 --ntasks-per-node=1 torchrun --nproc-per-node=2 (Palmetto's helper script).
        (envs.srun(1, ntasks=2, tasks_per_node="1(x2)") | envs.torchrun(3), "torchrun", 3, False),
        (envs.ompi(1, size=1, local_size=1) | envs.torchrun(3), "torchrun", 3, False),
        (envs.srun(0) | SRUN_PMIX | envs.torchrun(3), "torchrun", 3, False),
        (envs.ompi(3), "openmpi", 3, False),
        # mpirun inside sbatch: SLURM_PROCID=0 is the batch shell's, the rank is Open MPI's.
        (envs.sbatch() | envs.ompi(3), "openmpi", 3, False),
        (envs.SHELL | MVAPICH, "mvapich", 3, False),
        # MVAPICH2 under Hydra also sets PMI_RANK.
        (envs.SHELL | MVAPICH | HYDRA, "mvapich", 3, False),
        (envs.SHELL | HYDRA, "mpich", 3, False),
        # Cray PMI also sets PMI_RANK; PALS_RANKID tells it apart from Hydra.
        (envs.SHELL | PALS, "pals", 3, False),
        (envs.srun(3) | {"PMI_RANK": "3", "PMI_SIZE": "4", "PMI_FD": "17"}, "mpich", 3, True),
        (envs.srun(3) | {"PALS_RANKID": "3", "PALS_NODEID": "1"}, "pals", 3, True),
        (envs.srun(3) | SRUN_PMIX, "pmix", 3, True),
    ],
    ids=[
        "shell",
        "one-task-batch-script",
        "srun",
        "torchrun",
        "torchrun-in-srun",
        "torchrun-under-mpirun",
        "torchrun-in-srun-pmix",
        "mpirun",
        "mpirun-in-batch-script",
        "mvapich",
        "mvapich-hydra",
        "hydra",
        "pals",
        "srun-pmi2",
        "srun-cray-shasta",
        "srun-pmix",
    ],
)
def test_first_matching_source_wins(
    env: dict[str, str], source: str, rank: int, hosts_known: bool
) -> None:
    assert detect_source(env).name == source
    topology = resolve_topology(env)
    assert (topology.source, topology.rank) == (source, rank)
    assert bool(topology.hosts) is hosts_known


def test_della_srun_one_task_per_gpu() -> None:
    # Della: sbatch -N2 --ntasks-per-node=2 --gres=gpu:2, then srun python train.py.
    topology = resolve_topology(envs.srun(2, nodelist="della-l0[7-8]"))
    assert (topology.rank, topology.local_rank, topology.node_rank) == (2, 0, 1)
    assert topology.master_node == "della-l07"
    assert topology.job_key == "4242.0"


@pytest.mark.parametrize("ntasks", [2, 4, 128])
def test_multi_task_batch_script_without_srun_is_refused(ntasks: int) -> None:
    env = envs.sbatch(ntasks=ntasks, nnodes=2)
    message = (
        rf"^train was started once inside a batch script of {ntasks} tasks "
        rf"\(SLURM_NTASKS={ntasks}, no SLURM_STEP_ID\)"
    )
    with pytest.raises(LauncherError, match=message) as caught:
        resolve_topology(env)
    assert caught.value.hint is not None
    assert caught.value.hint.startswith("launch it with srun: srun train ...")


@pytest.mark.parametrize(
    "env",
    [
        envs.sbatch(ntasks=1, nnodes=1),
        {key: value for key, value in envs.sbatch().items() if key != "SLURM_NTASKS"},
        envs.sbatch() | envs.torchrun(0),
        envs.sbatch() | envs.ompi(0),
        envs.srun(0),
    ],
    ids=["one-task", "no-ntasks", "torchrun", "mpirun", "srun-step"],
)
def test_batch_script_guard_only_fires_for_a_bare_multi_task_script(env: dict[str, str]) -> None:
    resolve_topology(env)


def test_malformed_ntasks_in_a_batch_script_is_named() -> None:
    with pytest.raises(LauncherError, match=r"^slurm: SLURM_NTASKS=four is not a whole number"):
        resolve_topology(envs.sbatch() | {"SLURM_NTASKS": "four"})


def test_nodelist_errors_reach_the_caller() -> None:
    with pytest.raises(HostlistError, match=r"^SLURM_STEP_NODELIST='della-i14g\[2-1\]'"):
        resolve_topology(envs.srun(0) | {"SLURM_STEP_NODELIST": "della-i14g[2-1]"})


def _python(code: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return result.stdout.strip()


def test_importing_topology_does_not_import_torch() -> None:
    code = (
        "import ddpimg.topology, sys; "
        "ddpimg.topology.resolve_topology({}); "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    _python(code, dict(os.environ))


def test_resolution_ignores_the_real_environment() -> None:
    # The caller's mapping is the only input, whatever the process itself runs under.
    code = "from ddpimg.topology import resolve_topology; print(resolve_topology({}).source)"
    assert _python(code, dict(os.environ) | envs.srun(1) | envs.ompi(1)) == "single"
