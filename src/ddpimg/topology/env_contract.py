"""Ranks from the env:// contract: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT all set.

That is what ``init_process_group("env://")`` itself accepts, and what launchers other than
torchrun, Slurm and MPI give each process: DeepSpeed's launcher (``deepspeed --num_gpus N``,
also inside one ``srun`` task), Accelerate's, and hand-written ones. The source is called
``env``.

Where the rest of the placement comes from, first found wins (``ddpimg env --explain`` says
which, and when a value was derived):

================  ==============================================================
local_rank        LOCAL_RANK; else ``rank % local_world_size`` (block placement)
local_world_size  LOCAL_WORLD_SIZE (torchrun's name), LOCAL_SIZE (DeepSpeed's launcher);
                  else WORLD_SIZE / number of nodes when that is given; else
                  WORLD_SIZE when MASTER_ADDR is a loopback address (every rank on
                  this machine); else 1 when LOCAL_RANK is not set either (one rank
                  per host, as hand-written multi-node launchers do); else an error
node_rank         GROUP_RANK (torchrun), CROSS_RANK (DeepSpeed), NODE_RANK (Lightning);
                  else ``rank // local_world_size``
num_nodes         GROUP_WORLD_SIZE (torchrun), CROSS_SIZE (DeepSpeed); else
                  WORLD_SIZE / local_world_size, rounded up
================  ==============================================================

Its place in the detection order (``ddpimg.topology``) is after torchrun and before MPI and
Slurm, but it never takes a process that an MPI launcher or a Slurm step describes: when
such a launch around this process has exactly WORLD_SIZE tasks, the four variables were
exported for (or by) that launch, e.g. a batch script that ran ``export WORLD_SIZE=4 RANK=0
MASTER_PORT=...`` before ``srun train``, and the launcher's own variables are the truth.
When the counts differ, a launcher inside the step started more processes than the step
has tasks (``srun -n1 deepspeed --num_gpus 2``), and these are its workers.
"""

from __future__ import annotations

from ddpimg.errors import LauncherError
from ddpimg.topology._env import batch_job_id, parse_int, read_int, read_master
from ddpimg.topology.model import Env, Origin, Topology
from ddpimg.topology.mpi import MPI_SOURCES
from ddpimg.topology.slurm import SLURM_VARIABLES, in_slurm_step

NAME = "env"

CONTRACT = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

# Logical field -> the variables that may carry it, in preference order.
PLACEMENT_VARIABLES: dict[str, tuple[str, ...]] = {
    "local_rank": ("LOCAL_RANK",),
    "local_world_size": ("LOCAL_WORLD_SIZE", "LOCAL_SIZE"),
    "node_rank": ("GROUP_RANK", "CROSS_RANK", "NODE_RANK"),
    "num_nodes": ("GROUP_WORLD_SIZE", "CROSS_SIZE"),
}

_LOOPBACK_NAMES = ("localhost", "::1")


def is_loopback(addr: str) -> bool:
    """True for an address that only reaches this machine."""
    return addr.startswith("127.") or addr.lower() in _LOOPBACK_NAMES


def outer_launch_size(env: Env) -> tuple[str, str] | None:
    """(variable, value) of the task count of an MPI launch or Slurm step around this
    process, or None when there is none (raw text: compared, never parsed here)."""
    for source in MPI_SOURCES:
        layout = source.variables.layout
        if source.detect(env) and layout is not None and layout.world_size in env:
            return layout.world_size, env[layout.world_size].strip()
    if in_slurm_step(env):
        for name in SLURM_VARIABLES["world_size"]:
            if name in env:
                return name, env[name].strip()
    return None


class EnvContractSource:
    """A launcher that exports the env:// contract started this process."""

    name = NAME

    def detect(self, env: Env) -> bool:
        if not all(name in env for name in CONTRACT):
            return False
        outer = outer_launch_size(env)
        return outer is None or outer[1] != env["WORLD_SIZE"].strip()

    def read(self, env: Env) -> tuple[Topology, Origin]:
        rank = read_int(env, "RANK", NAME)
        world_size = read_int(env, "WORLD_SIZE", NAME)
        master = read_master(env, NAME, required=True)
        addr = master.addr or ""
        given = {field: _first(env, field) for field in PLACEMENT_VARIABLES}
        origin = {"rank": "RANK", "world_size": "WORLD_SIZE"}
        origin.update({field: found[0] for field, found in given.items() if found})
        values = {field: found[1] for field, found in given.items() if found}

        if "local_world_size" not in values:
            values["local_world_size"], origin["local_world_size"] = _derive_local_world_size(
                env, world_size, given["num_nodes"], is_loopback(addr)
            )
        per_node = max(values["local_world_size"], 1)  # 0 is the consistency check's to report
        derivations = {
            "local_rank": (rank % per_node, "RANK % local_world_size"),
            "node_rank": (rank // per_node, "RANK // local_world_size"),
            "num_nodes": (-(-world_size // per_node), "WORLD_SIZE / local_world_size, rounded up"),
        }
        for field, (value, how) in derivations.items():
            if field not in values:
                values[field], origin[field] = value, how
        notes = tuple(
            f"{field}={values[field]}: derived ({origin[field]})"
            for field in PLACEMENT_VARIABLES
            if given[field] is None
        )
        topology = Topology(
            source=NAME,
            rank=rank,
            world_size=world_size,
            local_rank=values["local_rank"],
            local_world_size=values["local_world_size"],
            node_rank=values["node_rank"],
            num_nodes=values["num_nodes"],
            master_node=addr,
            master_addr_explicit=True,
            master_port=master.port,
            job_key=f"{addr}:{master.port}",
            job_id=batch_job_id(env),
            notes=notes,
        )
        return topology, origin


def _derive_local_world_size(
    env: Env, world_size: int, num_nodes: tuple[str, int] | None, master_is_local: bool
) -> tuple[int, str]:
    """The ranks on this node when no variable says, and how that was decided."""
    if num_nodes and num_nodes[1] and world_size % num_nodes[1] == 0:
        return world_size // num_nodes[1], f"WORLD_SIZE / {num_nodes[0]}"
    if master_is_local:
        return world_size, "WORLD_SIZE: MASTER_ADDR is this machine"
    if "LOCAL_RANK" not in env:
        return 1, "one rank per host assumed: no LOCAL_RANK"
    searched = PLACEMENT_VARIABLES["local_world_size"] + PLACEMENT_VARIABLES["num_nodes"]
    raise LauncherError(
        f"{NAME}: LOCAL_RANK={env['LOCAL_RANK'].strip()} is set, but nothing says how many of "
        f"the WORLD_SIZE={world_size} ranks run on this node (none of {', '.join(searched)} "
        "is set, and MASTER_ADDR is not this machine)",
        "export LOCAL_WORLD_SIZE (the ranks on this node) with the other variables",
    )


def _first(env: Env, field: str) -> tuple[str, int] | None:
    """The first variable set for ``field`` and its value, or None."""
    for name in PLACEMENT_VARIABLES[field]:
        if name in env:
            return name, parse_int(name, env[name], NAME)
    return None
