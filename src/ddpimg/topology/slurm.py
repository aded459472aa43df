"""Ranks from a Slurm job step: one process per task, started by ``srun``.

A Slurm step is recognised by SLURM_STEP_ID, which ``srun`` sets and a batch script does not.
Slurm exports most facts twice, for the job and for the step; when both exist the step's
value is the right one (``srun -N1`` inside a two-node job runs on one node). SLURM_VARIABLES
is the table from each logical name to its variables in preference order; ``_lookup`` reads
it, and nothing else in the package names these variables.

* ``local_world_size`` is this node's own entry of the tasks-per-node list, which differs
  between nodes when the task count does not divide evenly (``srun -n 5 -N 2``: 3 and 2).
* ``master_node`` is the first host of the step's node list: Slurm's default block
  distribution puts rank 0 there. An exported MASTER_ADDR / MASTER_PORT wins.
* ``job_key`` is ``"<SLURM_JOB_ID>.<SLURM_STEP_ID>"`` for the port derivation.
"""

from __future__ import annotations

from collections.abc import Mapping

from ddpimg.errors import LauncherError
from ddpimg.topology._env import parse_int, read_master, read_str
from ddpimg.topology.hostlist import expand_hostlist
from ddpimg.topology.model import Env, Origin, Topology
from ddpimg.topology.tasks import parse_tasks_per_node

NAME = "slurm"

SLURM_VARIABLES: Mapping[str, tuple[str, ...]] = {
    "nodelist": ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"),
    "world_size": ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"),
    "num_nodes": ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
    "tasks_per_node": ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
    "rank": ("SLURM_PROCID",),
    "local_rank": ("SLURM_LOCALID",),
    "node_rank": ("SLURM_NODEID",),
    "job_id": ("SLURM_JOB_ID",),
    "step_id": ("SLURM_STEP_ID",),
}


def in_slurm_step(env: Env) -> bool:
    """True inside a task that ``srun`` started (not in the batch script itself)."""
    return "SLURM_STEP_ID" in env


def step_rank_and_size(env: Env) -> tuple[int, int]:
    """SLURM_PROCID and the step's task count: enough to tell whether srun started each rank."""
    return _read_int(env, "rank")[1], _read_int(env, "world_size")[1]


def resolve_step(env: Env) -> tuple[Topology, dict[str, str]]:
    """The step's topology and where each of its fields came from, not yet checked."""
    rank_name, rank = _read_int(env, "rank")
    world_name, world_size = _read_int(env, "world_size")
    local_name, local_rank = _read_int(env, "local_rank")
    node_name, node_rank = _read_int(env, "node_rank")
    nodes_name, num_nodes = _read_int(env, "num_nodes")
    list_name, nodelist = _lookup(env, "nodelist")
    hosts = expand_hostlist(nodelist, list_name)
    tasks_name, tasks_value = _lookup(env, "tasks_per_node")
    tasks_per_node = parse_tasks_per_node(tasks_value, tasks_name)
    if node_rank >= len(tasks_per_node):
        raise LauncherError(
            f"{NAME}: {node_name}={node_rank} has no entry in "
            f"{tasks_name}={tasks_value} ({len(tasks_per_node)} nodes)",
            "the node id and the tasks per node come from the same srun step and must agree; "
            "look for values exported by hand or left over from another job",
        )
    job_id = read_str(env, _lookup(env, "job_id")[0], NAME)
    step_id = read_str(env, _lookup(env, "step_id")[0], NAME)
    master = read_master(env, NAME)
    topology = Topology(
        source=NAME,
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=tasks_per_node[node_rank],
        node_rank=node_rank,
        num_nodes=num_nodes,
        hosts=tuple(hosts),
        tasks_per_node=tuple(tasks_per_node),
        master_node=master.addr or hosts[0],
        master_addr_explicit=master.addr is not None,
        master_port=master.port,
        job_key=f"{job_id}.{step_id}",
        job_id=job_id,
        rank_is_task=True,
    )
    origin = {
        "rank": rank_name,
        "world_size": world_name,
        "local_rank": local_name,
        "local_world_size": f"entry {node_rank} of {tasks_name}={tasks_value}",
        "node_rank": node_name,
        "num_nodes": nodes_name,
        "hosts": list_name,
        "tasks_per_node": tasks_name,
    }
    return topology, origin


class SlurmSource:
    """``srun`` started this process as one task of a step."""

    name = NAME

    def detect(self, env: Env) -> bool:
        return in_slurm_step(env)

    def read(self, env: Env) -> tuple[Topology, Origin]:
        return resolve_step(env)


def _lookup(env: Env, logical: str) -> tuple[str, str]:
    """The first variable set for ``logical`` in SLURM_VARIABLES, and its raw value."""
    names = SLURM_VARIABLES[logical]
    for name in names:
        if name in env:
            return name, env[name]
    missing = f"{names[0]} is not set" if len(names) == 1 else f"none of {', '.join(names)} is set"
    raise LauncherError(
        f"{NAME}: {missing} (inside a Slurm step: SLURM_STEP_ID is set)",
        "srun sets it for every task; check that nothing between srun and this process drops "
        "variables (apptainer --cleanenv, env -i, a wrapper script)",
    )


def _read_int(env: Env, logical: str) -> tuple[str, int]:
    name, value = _lookup(env, logical)
    return name, parse_int(name, value, NAME)
