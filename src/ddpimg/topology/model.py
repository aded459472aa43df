"""The resolved topology of one process: who launched it and where it sits in the job."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

Env = Mapping[str, str]
# The most ranks a job may have: 16 times the largest machine's GPUs (about 10^6), far
# below what a copied or mistyped variable can say (WORLD_SIZE=4294967297 would have the
# rendezvous wait for four billion ranks, and name each one missing).
MAX_WORLD_SIZE = 1 << 24


@dataclass(frozen=True)
class Topology:
    """Where this process sits in the job. Pure data; never reads the environment itself.

    ``hosts`` lists node names in node-rank order and ``tasks_per_node`` the number of ranks on
    each of them (block distribution: node 0 holds ranks 0..tasks_per_node[0]-1); both are empty
    when the launcher does not tell (``mpirun``). ``master_node`` is the host rank 0 runs on as
    the launcher names it, before the site's master-address rule; empty when it can only be
    learnt at run time. ``master_addr_explicit`` is True when the launcher or the user already
    fixed MASTER_ADDR (torchrun, an exported MASTER_ADDR), so no site rule is applied to it.
    ``master_port`` is the explicit port when one was given, otherwise None (derived later
    from the job identity and the profile's port range). ``job_key`` identifies the job and
    step for that port derivation: identical on every rank, distinct between jobs and steps.
    """

    source: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    hosts: tuple[str, ...] = ()
    tasks_per_node: tuple[int, ...] = ()
    master_node: str = ""
    master_addr_explicit: bool = False
    master_port: int | None = None
    job_key: str = ""
    job_id: str = ""
    # Capabilities, read by the plan and the runtime so that they never test a launcher's
    # name. master_via_mpi: the ranks share an MPI world, so rank 0 can publish its address
    # at run time (an interface rule, or no host list at all). all_local: the launcher
    # started every rank on this machine, so loopback reaches rank 0 (and a lone process
    # given no port may take any free one). rank_is_task: srun started each rank as a task
    # of its step (itself, or under an MPI plugin), so what Slurm allots a task
    # (SLURM_CPUS_PER_TASK) is this rank's alone, not shared with the node's other ranks.
    master_via_mpi: bool = False
    all_local: bool = False
    rank_is_task: bool = False
    # How values the launcher did not give were derived, for ``ddpimg env --explain``.
    notes: tuple[str, ...] = ()

    def host_of_rank(self, rank: int) -> str | None:
        """The node a rank runs on under block distribution, or None when unknown."""
        if not self.hosts or len(self.tasks_per_node) != len(self.hosts):
            return None
        first = 0
        for host, count in zip(self.hosts, self.tasks_per_node, strict=True):
            if rank < first + count:
                return host
            first += count
        return None


# Where each field of a topology came from: field name -> variable name, or an expression for
# a derived field; the consistency check names these when values disagree.
Origin = Mapping[str, str]


class RankSource(Protocol):
    """One launcher's way of telling a process its rank. One module per launcher."""

    name: str

    def detect(self, env: Env) -> bool:
        """True when this launcher started the process (cheap; presence of marker variables)."""
        ...

    def read(self, env: Env) -> tuple[Topology, Origin]:
        """The topology as the launcher's variables give it, and where each field came from.
        Raises LauncherError naming a variable that is missing or malformed; whether the
        fields agree with each other is ``topology.resolve_with``'s check, not the source's."""
        ...
