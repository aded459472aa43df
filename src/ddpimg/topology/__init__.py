"""Which launcher started this process, and where the process sits in the job.

``resolve_topology(env)`` is a pure function of an environment mapping (never os.environ, never
torch). It asks each rank source in RANK_SOURCES, in order, whether it started the process;
the first that answers yes resolves the topology, and its result passes the shared consistency
check (``consistency.check_topology``) before it is returned.

Detection order, most specific first:

1. ``torchrun``: its workers also carry SLURM_* when torchrun runs inside ``srun``, and MPI
   variables when it runs under ``mpirun``; the workers are torchrun's.
2. ``env``: the env:// contract (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) from a launcher
   such as DeepSpeed's, unless an MPI launch or a Slurm step around the process has exactly
   WORLD_SIZE tasks: then the variables describe that launch, and it resolves them
   (``topology/env_contract.py``).
3. ``openmpi``, ``mvapich``, ``mpich``, ``pals``, ``pmix``: inside a Slurm allocation ``mpirun``
   leaves SLURM_* variables that describe its daemons, not the ranks. MVAPICH also sets
   PMI_RANK (so it precedes MPICH), Open MPI also sets PMIX_RANK (so it precedes PMIx).
4. ``slurm``: a task that ``srun`` started (SLURM_STEP_ID is set).
5. ``single``: none of the above.

``single`` refuses one mistake: ``train`` run once inside a batch script that asked for
several tasks (SLURM_NTASKS > 1, no SLURM_STEP_ID). It would train alone while the allocation
idles, so it is an error with the fix (``srun train ...``).
"""

from __future__ import annotations

from ddpimg.topology.consistency import check_topology
from ddpimg.topology.env_contract import EnvContractSource
from ddpimg.topology.hostlist import expand_hostlist
from ddpimg.topology.model import Env, RankSource, Topology
from ddpimg.topology.mpi import MPI_SOURCES
from ddpimg.topology.port import derive_port
from ddpimg.topology.single import SingleSource
from ddpimg.topology.slurm import SlurmSource
from ddpimg.topology.tasks import parse_tasks_per_node
from ddpimg.topology.torchrun import TorchrunSource

RANK_SOURCES: tuple[RankSource, ...] = (
    TorchrunSource(),
    EnvContractSource(),
    *MPI_SOURCES,
    SlurmSource(),
    SingleSource(),
)


def detect_source(env: Env) -> RankSource:
    """The first rank source in RANK_SOURCES that recognises ``env`` (``single`` at worst)."""
    return next(source for source in RANK_SOURCES if source.detect(env))


def resolve_with(source: RankSource, env: Env) -> Topology:
    """The topology ``source`` reads from ``env``, once its fields passed the consistency
    check (the only place that runs it)."""
    topology, origin = source.read(env)
    return check_topology(topology, origin, env)


def resolve_topology(env: Env) -> Topology:
    """The topology of the process whose environment is ``env``.

    Raises LauncherError (HostlistError for node lists) naming the variables and values when
    they are missing, malformed or contradict each other.
    """
    return resolve_with(detect_source(env), env)


__all__ = [
    "RANK_SOURCES",
    "Topology",
    "derive_port",
    "detect_source",
    "expand_hostlist",
    "parse_tasks_per_node",
    "resolve_topology",
    "resolve_with",
]
