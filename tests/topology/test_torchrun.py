"""Ranks from torchrun workers: detection, node count, master, errors."""

from __future__ import annotations

import pytest

from ddpimg.errors import LauncherError
from ddpimg.topology import resolve_with
from ddpimg.topology.model import Topology
from ddpimg.topology.torchrun import TorchrunSource
from tests.topology import envs

TORCHRUN = TorchrunSource()
HAND_MADE = envs.SHELL | {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}


def without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {key: value for key, value in env.items() if key not in names}


@pytest.mark.parametrize(
    ("env", "detected"),
    [
        (envs.torchrun(0), True),
        (envs.torchrun(0) | envs.srun(0), True),
        ({"TORCHELASTIC_RUN_ID": "x"}, True),
        (without(envs.torchrun(1), "TORCHELASTIC_RUN_ID"), True),
        (HAND_MADE | {"GROUP_RANK": "0"}, True),
        (HAND_MADE | {"TORCHELASTIC_RESTART_COUNT": "0"}, True),
        (HAND_MADE, False),
        (without(HAND_MADE, "LOCAL_RANK") | {"GROUP_RANK": "0"}, False),
        (envs.srun(0), False),
        (envs.ompi(0), False),
        (envs.SHELL, False),
    ],
    ids=[
        "torchrun",
        "torchrun-in-srun",
        "run-id-only",
        "no-run-id",
        "group-rank",
        "elastic-marker",
        "hand-made-rank-only",
        "no-local-rank",
        "srun",
        "mpirun",
        "shell",
    ],
)
def test_detection(env: dict[str, str], detected: bool) -> None:
    assert TORCHRUN.detect(env) is detected


@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_each_worker_of_two_nodes_by_two(rank: int) -> None:
    assert resolve_with(TORCHRUN, envs.torchrun(rank)) == Topology(
        source="torchrun",
        rank=rank,
        world_size=4,
        local_rank=rank % 2,
        local_world_size=2,
        node_rank=rank // 2,
        num_nodes=2,
        master_node="della-i14g1",
        master_addr_explicit=True,
        master_port=29500,
        job_key="ddp-4242",
    )


def test_inside_srun_torchrun_variables_win_over_slurm() -> None:
    # srun -N2 --ntasks-per-node=1 torchrun --nproc-per-node=2: Slurm sees one task per node.
    env = envs.srun(1, ntasks=2, tasks_per_node="1(x2)") | envs.torchrun(3)
    topology = resolve_with(TORCHRUN, env)
    assert (topology.rank, topology.world_size, topology.node_rank) == (3, 4, 1)
    assert (topology.local_rank, topology.local_world_size) == (1, 2)
    assert topology.hosts == ()
    assert topology.job_id == "4242"


def test_group_world_size_counts_nodes_with_uneven_workers() -> None:
    # Two agents with 4 and 2 workers: 6 // 2 would say three nodes.
    env = envs.torchrun(5) | {
        "WORLD_SIZE": "6",
        "LOCAL_WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "GROUP_RANK": "1",
    }
    assert resolve_with(TORCHRUN, env).num_nodes == 2


def test_without_group_world_size_nodes_are_world_over_local() -> None:
    env = without(envs.torchrun(5, nproc_per_node=2, nnodes=4), "GROUP_WORLD_SIZE")
    assert resolve_with(TORCHRUN, env).num_nodes == 4


@pytest.mark.parametrize(
    ("changes", "removed", "message"),
    [
        (
            {"WORLD_SIZE": "5"},
            ("GROUP_WORLD_SIZE",),
            r"^torchrun: GROUP_WORLD_SIZE is not set and WORLD_SIZE=5 is not a multiple of "
            r"LOCAL_WORLD_SIZE=2",
        ),
        ({}, ("RANK",), r"^torchrun: RANK is not set"),
        ({}, ("LOCAL_WORLD_SIZE",), r"^torchrun: LOCAL_WORLD_SIZE is not set"),
        ({}, ("GROUP_RANK",), r"^torchrun: GROUP_RANK is not set"),
        ({}, ("MASTER_ADDR",), r"^torchrun: MASTER_ADDR is not set"),
        ({}, ("MASTER_PORT",), r"^torchrun: MASTER_PORT is not set"),
        ({"MASTER_ADDR": ""}, (), r"^torchrun: MASTER_ADDR is set but empty"),
        ({"MASTER_PORT": "99999"}, (), r"^torchrun: MASTER_PORT=99999 is not a TCP port"),
        ({"RANK": ""}, (), r"^torchrun: RANK is set but empty"),
        ({"RANK": "x1"}, (), r"^torchrun: RANK=x1 is not a whole number"),
        ({"LOCAL_RANK": "-1"}, (), r"^torchrun: LOCAL_RANK=-1 is negative"),
        ({"RANK": "4"}, (), r"^torchrun: RANK=4 is not below WORLD_SIZE=4"),
        ({"LOCAL_RANK": "2"}, (), r"^torchrun: LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"),
        ({"GROUP_RANK": "2"}, (), r"^torchrun: GROUP_RANK=2 is not below GROUP_WORLD_SIZE=2"),
        (
            {"LOCAL_WORLD_SIZE": "8"},
            (),
            r"^torchrun: LOCAL_WORLD_SIZE=8 is larger than WORLD_SIZE=4",
        ),
        ({"GROUP_WORLD_SIZE": "0"}, (), r"^torchrun: GROUP_WORLD_SIZE=0 must be at least 1"),
        (
            {"GROUP_WORLD_SIZE": "5"},
            (),
            r"^torchrun: GROUP_WORLD_SIZE=5 is larger than WORLD_SIZE=4",
        ),
    ],
)
def test_errors_name_variables_and_values(
    changes: dict[str, str], removed: tuple[str, ...], message: str
) -> None:
    env = without(envs.torchrun(0), *removed) | changes
    with pytest.raises(LauncherError, match=message) as caught:
        resolve_with(TORCHRUN, env)
    err = caught.value
    assert err.hint, "every launcher error says what to do"
    assert str(err) == f"{err.message}\n  hint: {err.hint}"


def test_derived_node_count_is_named_as_derived() -> None:
    env = without(envs.torchrun(0), "GROUP_WORLD_SIZE") | {"GROUP_RANK": "2"}
    with pytest.raises(
        LauncherError,
        match=r"GROUP_RANK=2 is not below node count 2 \(from WORLD_SIZE / LOCAL_WORLD_SIZE\)",
    ):
        resolve_with(TORCHRUN, env)
