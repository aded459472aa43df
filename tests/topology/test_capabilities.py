"""The capabilities a topology carries, which the plan and the runtime read instead of
testing launcher names: whether rank 0 can publish its address over MPI, whether every
rank runs on this machine, and whether each rank is a task of the batch system (which then
owns the task's CPUs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg.plan import build_plan
from ddpimg.runtime import rendezvous_port
from ddpimg.topology import resolve_topology
from tests.topology import envs


@pytest.mark.parametrize(
    ("env", "source", "master_via_mpi", "all_local", "rank_is_task"),
    [
        (envs.SHELL, "single", False, True, False),
        (envs.torchrun(1, nnodes=1), "torchrun", False, True, False),
        (envs.torchrun(1, nnodes=2), "torchrun", False, False, False),
        (envs.deepspeed_launcher(1), "env", False, False, False),
        (envs.srun(1), "slurm", False, False, True),
        (envs.ompi(1), "openmpi", True, False, False),
        # MPI ranks that srun started: each is a Slurm task all the same.
        (envs.srun(1) | {"PMI_RANK": "1", "PMI_SIZE": "4"}, "mpich", True, False, True),
    ],
    ids=["shell", "torchrun-1-node", "torchrun-2-nodes", "deepspeed", "srun", "mpirun", "srun-pmi"],
)
def test_each_source_states_its_capabilities(
    env: dict[str, str], source: str, master_via_mpi: bool, all_local: bool, rank_is_task: bool
) -> None:
    topology = resolve_topology(env)
    assert topology.source == source
    assert (topology.master_via_mpi, topology.all_local) == (master_via_mpi, all_local)
    assert topology.rank_is_task == rank_is_task


def test_only_an_all_local_job_falls_back_to_the_loopback() -> None:
    # Neither an MPI launch without a host list nor a lone process elsewhere may guess.
    assert build_plan(envs.SHELL, "laptop").master_addr == "127.0.0.1"
    assert build_plan(envs.ompi(1), "laptop").master_addr == ""


def test_a_lone_process_without_a_port_takes_a_free_one() -> None:
    lone = build_plan(envs.SHELL, "laptop")
    pinned = build_plan(envs.SHELL | {"MASTER_PORT": "29511"}, "laptop")
    pair = build_plan(envs.torchrun(0, nnodes=1), "laptop")
    assert rendezvous_port(pinned) == 29511
    assert rendezvous_port(pair) == 29500
    # The kernel hands out a free port from its ephemeral range, not the derived one.
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert low <= rendezvous_port(lone) <= high
    assert not low <= lone.master_port <= high
