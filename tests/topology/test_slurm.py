"""Ranks from a Slurm step: every task's place, step-over-job precedence, every error."""

from __future__ import annotations

import pytest

from ddpimg.errors import HostlistError, LauncherError
from ddpimg.topology import resolve_with
from ddpimg.topology.model import Topology
from ddpimg.topology.slurm import SLURM_VARIABLES, SlurmSource
from tests.topology import envs

SLURM = SlurmSource()


def without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {key: value for key, value in env.items() if key not in names}


@pytest.mark.parametrize(
    ("env", "detected"),
    [
        (envs.srun(0), True),
        (envs.sbatch(), False),
        (envs.SHELL, False),
        (envs.torchrun(0), False),
    ],
    ids=["srun-task", "batch-script", "shell", "torchrun"],
)
def test_detects_only_tasks_started_by_srun(env: dict[str, str], detected: bool) -> None:
    assert SLURM.detect(env) is detected


@pytest.mark.parametrize(
    ("procid", "local_rank", "node_rank"),
    [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)],
)
def test_each_task_of_two_by_two_step(procid: int, local_rank: int, node_rank: int) -> None:
    assert resolve_with(SLURM, envs.srun(procid)) == Topology(
        source="slurm",
        rank=procid,
        world_size=4,
        local_rank=local_rank,
        local_world_size=2,
        node_rank=node_rank,
        num_nodes=2,
        hosts=("della-i14g1", "della-i14g2"),
        tasks_per_node=(2, 2),
        master_node="della-i14g1",
        master_addr_explicit=False,
        master_port=None,
        job_key="4242.0",
        job_id="4242",
        rank_is_task=True,
    )


@pytest.mark.parametrize(
    ("procid", "local_rank", "local_world_size", "node_rank"),
    [(0, 0, 3, 0), (2, 2, 3, 0), (3, 0, 2, 1), (4, 1, 2, 1)],
)
def test_uneven_step_gives_each_node_its_own_local_size(
    procid: int, local_rank: int, local_world_size: int, node_rank: int
) -> None:
    # srun -n 5 -N 2: 3 tasks on the first node, 2 on the second (not 5 // 2).
    topology = resolve_with(SLURM, envs.srun(procid, ntasks=5, tasks_per_node="3,2"))
    assert (topology.rank, topology.world_size) == (procid, 5)
    assert (topology.local_rank, topology.local_world_size) == (local_rank, local_world_size)
    assert topology.node_rank == node_rank
    assert topology.tasks_per_node == (3, 2)


def test_step_on_part_of_the_job_uses_step_variables() -> None:
    # srun -N1 -n2 inside the two-node, four-task job: the job variables describe the job.
    env = envs.srun(1, ntasks=2, nnodes=1, nodelist="della-i14g2", tasks_per_node="2", step_id="3")
    topology = resolve_with(SLURM, env)
    assert (topology.world_size, topology.num_nodes) == (2, 1)
    assert topology.hosts == ("della-i14g2",)
    assert topology.master_node == "della-i14g2"
    assert topology.job_key == "4242.3"


STEP = envs.srun(0) | {
    "SLURM_STEP_NODELIST": "step[1-2]",
    "SLURM_JOB_NODELIST": "job[1-2]",
    "SLURM_NODELIST": "old[1-2]",
}


@pytest.mark.parametrize(
    ("removed", "first_host"),
    [
        ((), "step1"),
        (("SLURM_STEP_NODELIST",), "job1"),
        (("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"), "old1"),
        (("SLURM_JOB_NODELIST",), "step1"),
        (("SLURM_JOB_NODELIST", "SLURM_NODELIST"), "step1"),
    ],
)
def test_nodelist_precedence(removed: tuple[str, ...], first_host: str) -> None:
    topology = resolve_with(SLURM, without(STEP, *removed))
    assert topology.hosts[0] == topology.master_node == first_host


# A step of 2 tasks on 1 node inside a job of 4 tasks on 2 nodes: each cell shows which wins.
PARTIAL = envs.srun(0, ntasks=2, nnodes=1, nodelist="della-i14g1", tasks_per_node="2") | {
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_NTASKS": "4",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_JOB_NODELIST": "della-i14g[1-2]",
}


def test_partial_step_resolves_from_step_variables() -> None:
    topology = resolve_with(SLURM, PARTIAL)
    assert (topology.world_size, topology.num_nodes, topology.tasks_per_node) == (2, 1, (2,))


@pytest.mark.parametrize(
    ("removed", "message"),
    [
        (
            ("SLURM_STEP_NUM_TASKS",),
            r"SLURM_STEP_TASKS_PER_NODE=2 adds up to 2 tasks but SLURM_NTASKS=4",
        ),
        (
            ("SLURM_STEP_NUM_NODES",),
            r"SLURM_STEP_NODELIST=della-i14g1 names 1 node but SLURM_JOB_NUM_NODES=2",
        ),
        (
            ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES"),
            r"SLURM_STEP_NODELIST=della-i14g1 names 1 node but SLURM_NNODES=2",
        ),
        (
            ("SLURM_STEP_TASKS_PER_NODE",),
            r"SLURM_TASKS_PER_NODE=2\(x2\) covers 2 nodes but SLURM_STEP_NUM_NODES=1",
        ),
        (
            ("SLURM_STEP_NODELIST",),
            r"SLURM_JOB_NODELIST=della-i14g\[1-2\] names 2 nodes but SLURM_STEP_NUM_NODES=1",
        ),
    ],
)
def test_job_variable_is_the_fallback_when_the_step_variable_is_missing(
    removed: tuple[str, ...], message: str
) -> None:
    # In a step on part of the job the job-wide value is wrong; the error names the variable
    # that was actually used, which shows the fallback order.
    with pytest.raises(LauncherError, match=message):
        resolve_with(SLURM, without(PARTIAL, *removed))


@pytest.mark.parametrize(
    ("logical", "names"),
    [
        ("nodelist", ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")),
        ("world_size", ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")),
        ("num_nodes", ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES")),
        ("tasks_per_node", ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")),
        ("rank", ("SLURM_PROCID",)),
        ("local_rank", ("SLURM_LOCALID",)),
        ("node_rank", ("SLURM_NODEID",)),
    ],
)
def test_variable_table_prefers_step_scoped_names(logical: str, names: tuple[str, ...]) -> None:
    assert SLURM_VARIABLES[logical] == names


def test_exported_master_addr_and_port_win() -> None:
    env = envs.srun(2) | {"MASTER_ADDR": "della-i14g1-ib", "MASTER_PORT": "12345"}
    topology = resolve_with(SLURM, env)
    assert topology.master_node == "della-i14g1-ib"
    assert topology.master_addr_explicit is True
    assert topology.master_port == 12345


def test_exported_master_port_alone_keeps_the_first_host() -> None:
    topology = resolve_with(SLURM, envs.srun(2) | {"MASTER_PORT": "12345"})
    assert (topology.master_node, topology.master_addr_explicit) == ("della-i14g1", False)
    assert topology.master_port == 12345


@pytest.mark.parametrize(
    ("changes", "removed", "message"),
    [
        ({}, ("SLURM_PROCID",), r"^slurm: SLURM_PROCID is not set \(inside a Slurm step"),
        (
            {},
            ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"),
            r"^slurm: none of SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_NODELIST is set",
        ),
        (
            {},
            ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
            r"none of SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE is set",
        ),
        ({}, ("SLURM_JOB_ID",), r"^slurm: SLURM_JOB_ID is not set"),
        ({"SLURM_PROCID": ""}, (), r"^slurm: SLURM_PROCID is set but empty"),
        ({"SLURM_LOCALID": "one"}, (), r"^slurm: SLURM_LOCALID=one is not a whole number"),
        ({"SLURM_NODEID": "-1"}, (), r"^slurm: SLURM_NODEID=-1 is negative"),
        ({"SLURM_STEP_NUM_TASKS": "4.0"}, (), r"SLURM_STEP_NUM_TASKS=4.0 is not a whole number"),
        ({"SLURM_JOB_ID": " "}, (), r"^slurm: SLURM_JOB_ID is set but empty"),
        (
            {"SLURM_NODEID": "2"},
            (),
            r"^slurm: SLURM_NODEID=2 has no entry in SLURM_STEP_TASKS_PER_NODE=2\(x2\) \(2 nodes\)",
        ),
        (
            {"SLURM_STEP_NUM_NODES": "3"},
            (),
            r"^slurm: SLURM_STEP_NODELIST=della-i14g\[1-2\] names 2 nodes "
            r"but SLURM_STEP_NUM_NODES=3",
        ),
        (
            {"SLURM_STEP_TASKS_PER_NODE": "1(x4)", "SLURM_STEP_NUM_NODES": "4"},
            (),
            r"SLURM_STEP_NODELIST=della-i14g\[1-2\] names 2 nodes but SLURM_STEP_NUM_NODES=4",
        ),
        (
            {"SLURM_STEP_TASKS_PER_NODE": "2(x3)"},
            (),
            r"SLURM_STEP_TASKS_PER_NODE=2\(x3\) covers 3 nodes but SLURM_STEP_NUM_NODES=2",
        ),
        (
            {"SLURM_STEP_NUM_TASKS": "5"},
            (),
            r"SLURM_STEP_TASKS_PER_NODE=2\(x2\) adds up to 4 tasks but SLURM_STEP_NUM_TASKS=5",
        ),
        ({"SLURM_PROCID": "4"}, (), r"^slurm: SLURM_PROCID=4 is not below SLURM_STEP_NUM_TASKS=4"),
        (
            {"SLURM_LOCALID": "2"},
            (),
            r"^slurm: SLURM_LOCALID=2 is not below local world size 2 "
            r"\(from entry 0 of SLURM_STEP_TASKS_PER_NODE=2\(x2\)\)",
        ),
        (
            {"SLURM_STEP_NUM_TASKS": "0"},
            (),
            r"^slurm: SLURM_STEP_NUM_TASKS=0 must be at least 1",
        ),
        ({"MASTER_ADDR": ""}, (), r"^slurm: MASTER_ADDR is set but empty"),
        ({"MASTER_PORT": "80000"}, (), r"^slurm: MASTER_PORT=80000 is not a TCP port"),
        ({"MASTER_PORT": "0"}, (), r"^slurm: MASTER_PORT=0 is not a TCP port"),
        ({"MASTER_PORT": "auto"}, (), r"^slurm: MASTER_PORT=auto is not a whole number"),
    ],
)
def test_errors_name_variables_and_values(
    changes: dict[str, str], removed: tuple[str, ...], message: str
) -> None:
    env = without(envs.srun(0), *removed) | changes
    with pytest.raises(LauncherError, match=message) as caught:
        resolve_with(SLURM, env)
    err = caught.value
    assert err.hint, "every launcher error says what to do"
    assert str(err) == f"{err.message}\n  hint: {err.hint}"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SLURM_STEP_NODELIST", "della-i14g[1-2", r"^SLURM_STEP_NODELIST='della-i14g\[1-2': "),
        ("SLURM_STEP_NODELIST", "", r"^SLURM_STEP_NODELIST='': the host list is empty"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2", r"^SLURM_STEP_TASKS_PER_NODE='2\(x2': entry"),
    ],
)
def test_malformed_lists_name_the_step_variable(variable: str, value: str, message: str) -> None:
    with pytest.raises(HostlistError, match=message):
        resolve_with(SLURM, envs.srun(0) | {variable: value})
