"""Realistic launcher environments for the topology tests, as the launchers write them.

The variable sets follow what the launchers were seen to export: srun and sbatch of Slurm
22.05 (ENVIRONMENT.md), mpirun of Open MPI 4.1.4 (run on the build machine), torchrun of
torch 2.x (torch/distributed/elastic/agent/server/local_elastic_agent.py).
"""

from __future__ import annotations

# A login shell's leftovers that no resolver may mistake for launcher variables.
SHELL = {"HOME": "/home/ada", "PATH": "/usr/bin:/bin", "HOSTNAME": "della-gpu", "LANG": "C.UTF-8"}


def sbatch(
    *, ntasks: int = 4, nodelist: str = "della-i14g[1-2]", nnodes: int = 2
) -> dict[str, str]:
    """The batch script of ``sbatch -N2 --ntasks-per-node=2``: job variables, no step."""
    per_node = ntasks // nnodes
    return SHELL | {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOBID": "4242",
        "SLURM_JOB_NAME": "ddp",
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(nnodes),
        "SLURM_NNODES": str(nnodes),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_TASKS_PER_NODE": f"{per_node}(x{nnodes})" if nnodes > 1 else str(per_node),
        "SLURM_JOB_CPUS_PER_NODE": "8(x2)",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_SUBMIT_DIR": "/home/ada/ddp",
        "SLURM_CLUSTER_NAME": "della",
    }


def srun(
    procid: int,
    *,
    ntasks: int = 4,
    nnodes: int = 2,
    nodelist: str = "della-i14g[1-2]",
    tasks_per_node: str = "2(x2)",
    job_id: str = "4242",
    step_id: str = "0",
) -> dict[str, str]:
    """Task ``procid`` of ``srun`` inside the batch job above: job and step variables both set.

    Local and node ids follow Slurm's block distribution over ``tasks_per_node``.
    """
    counts = _expand_counts(tasks_per_node)
    node, first = 0, 0
    while procid >= first + counts[node]:
        first += counts[node]
        node += 1
    return sbatch() | {
        "SLURM_JOB_ID": job_id,
        "SLURM_JOBID": job_id,
        "SLURM_STEP_ID": step_id,
        "SLURM_STEPID": step_id,
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_NUM_NODES": str(nnodes),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": str(procid - first),
        "SLURM_NODEID": str(node),
        "SLURM_GTIDS": ",".join(str(first + i) for i in range(counts[node])),
        "SLURM_DISTRIBUTION": "block",
        "SLURM_SRUN_COMM_HOST": "10.77.0.1",
        "SLURMD_NODENAME": f"della-i14g{node + 1}",
    }


def torchrun(
    rank: int, *, nproc_per_node: int = 2, nnodes: int = 2, master: str = "della-i14g1"
) -> dict[str, str]:
    """Worker ``rank`` of ``torchrun --nnodes=2 --nproc-per-node=2`` (same count on each node)."""
    return SHELL | {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank % nproc_per_node),
        "GROUP_RANK": str(rank // nproc_per_node),
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(nproc_per_node),
        "WORLD_SIZE": str(nproc_per_node * nnodes),
        "GROUP_WORLD_SIZE": str(nnodes),
        "ROLE_WORLD_SIZE": str(nproc_per_node * nnodes),
        "MASTER_ADDR": master,
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": "ddp-4242",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "OMP_NUM_THREADS": "1",
    }


def deepspeed_launcher(
    rank: int, *, num_gpus: int = 2, nnodes: int = 1, master: str = "127.0.0.1"
) -> dict[str, str]:
    """Worker ``rank`` of DeepSpeed's launcher (deepspeed/launcher/launch.py, 0.19):
    ``deepspeed --num_gpus 2``; its workers get no TORCHELASTIC_* or GROUP_* variables."""
    return SHELL | {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank % num_gpus),
        "WORLD_SIZE": str(num_gpus * nnodes),
        "LOCAL_SIZE": str(num_gpus),
        "CROSS_RANK": str(rank // num_gpus),
        "CROSS_SIZE": str(nnodes),
        "MASTER_ADDR": master,
        "MASTER_PORT": "29500",
        "OMP_NUM_THREADS": "1",
    }


def ompi(rank: int, *, size: int = 4, local_size: int = 2) -> dict[str, str]:
    """Rank ``rank`` of Open MPI 4.1's ``mpirun -np 4 --map-by slot`` (as seen on Debian 12)."""
    return SHELL | {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(size),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % local_size),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size),
        # The rank among every job's processes on the node, not the node index.
        "OMPI_COMM_WORLD_NODE_RANK": str(rank % local_size),
        "OMPI_MCA_ess_base_jobid": "2076704769",
        "OMPI_MCA_ess_base_vpid": str(rank),
        "OMPI_MCA_orte_ess_num_procs": str(size),
        "OMPI_COMMAND": "train",
        "PMIX_NAMESPACE": "2076704769",
        "PMIX_RANK": str(rank),
    }


def _expand_counts(tasks_per_node: str) -> list[int]:
    counts: list[int] = []
    for entry in tasks_per_node.split(","):
        tasks, _, repeat = entry.partition("(x")
        counts += [int(tasks)] * (int(repeat.rstrip(")")) if repeat else 1)
    return counts
