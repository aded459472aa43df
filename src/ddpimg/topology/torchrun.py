"""Ranks from torchrun (torch.distributed.run / torchelastic): its agent starts the workers.

torchrun gives every worker RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the
node's index), GROUP_WORLD_SIZE (the number of agents, i.e. nodes), MASTER_ADDR, MASTER_PORT
and TORCHELASTIC_* markers. Its rendezvous store already listens on MASTER_ADDR:MASTER_PORT,
so both are taken as given (``master_addr_explicit``), never rewritten by a site rule.

torchrun wins over every other launcher: ``srun torchrun ...`` leaves SLURM_* variables in the
workers' environment, but they describe the torchrun agents (one task per node), not the
workers.

``num_nodes`` is GROUP_WORLD_SIZE; when it is absent (a hand-made environment that imitates
torchrun), WORLD_SIZE / LOCAL_WORLD_SIZE, which needs the same number of workers on every node.
Host names and tasks per node are unknown (empty).
"""

from __future__ import annotations

from ddpimg.errors import LauncherError
from ddpimg.topology._env import batch_job_id, read_int, read_master, read_optional_int
from ddpimg.topology.model import Env, Origin, Topology

NAME = "torchrun"

_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


class TorchrunSource:
    """torchrun (or an elastic agent) started this process as one of its workers."""

    name = NAME

    def detect(self, env: Env) -> bool:
        if "TORCHELASTIC_RUN_ID" in env:
            return True
        # RANK/WORLD_SIZE alone are too common (hand-written scripts export them); an agent
        # always adds GROUP_RANK and its TORCHELASTIC_* bookkeeping.
        return all(name in env for name in _RANK_VARIABLES) and (
            "GROUP_RANK" in env or any(name.startswith("TORCHELASTIC_") for name in env)
        )

    def read(self, env: Env) -> tuple[Topology, Origin]:
        rank = read_int(env, "RANK", NAME)
        world_size = read_int(env, "WORLD_SIZE", NAME)
        local_rank = read_int(env, "LOCAL_RANK", NAME)
        local_world_size = read_int(env, "LOCAL_WORLD_SIZE", NAME)
        node_rank = read_int(env, "GROUP_RANK", NAME)
        num_nodes = read_optional_int(env, "GROUP_WORLD_SIZE", NAME)
        nodes_origin = "GROUP_WORLD_SIZE"
        if num_nodes is None:
            num_nodes = _uniform_node_count(world_size, local_world_size)
            nodes_origin = "WORLD_SIZE / LOCAL_WORLD_SIZE"
        master = read_master(env, NAME, required=True)
        topology = Topology(
            source=NAME,
            rank=rank,
            world_size=world_size,
            local_rank=local_rank,
            local_world_size=local_world_size,
            node_rank=node_rank,
            num_nodes=num_nodes,
            master_node=master.addr or "",
            master_addr_explicit=True,
            master_port=master.port,
            job_key=env.get("TORCHELASTIC_RUN_ID", "").strip(),
            job_id=batch_job_id(env),
            all_local=world_size == local_world_size,
        )
        origin = {
            "rank": "RANK",
            "world_size": "WORLD_SIZE",
            "local_rank": "LOCAL_RANK",
            "local_world_size": "LOCAL_WORLD_SIZE",
            "node_rank": "GROUP_RANK",
            "num_nodes": nodes_origin,
        }
        return topology, origin


def _uniform_node_count(world_size: int, local_world_size: int) -> int:
    if local_world_size < 1 or world_size % local_world_size:
        raise LauncherError(
            f"{NAME}: GROUP_WORLD_SIZE is not set and WORLD_SIZE={world_size} is not a multiple "
            f"of LOCAL_WORLD_SIZE={local_world_size}, so the number of nodes is unknown",
            "torchrun sets GROUP_WORLD_SIZE for every worker; launch with torchrun itself, or "
            "export GROUP_WORLD_SIZE with the number of nodes",
        )
    return world_size // local_world_size
