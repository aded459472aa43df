"""Ranks from MPI launchers: Open MPI, MVAPICH, MPICH Hydra / Intel MPI, Cray PALS, PMIx.

Each launcher is the same MpiSource class with its own table of variables (MpiVariables):

============  ==========================  ============================  =====================
source        rank / world size           local rank / local size       other
============  ==========================  ============================  =====================
openmpi       OMPI_COMM_WORLD_RANK/SIZE   OMPI_COMM_WORLD_LOCAL_RANK/   job key PMIX_NAMESPACE
                                          LOCAL_SIZE                    (Open MPI 4 and 5)
mvapich       MV2_COMM_WORLD_RANK/SIZE    MV2_COMM_WORLD_LOCAL_RANK/
                                          LOCAL_SIZE
mpich         PMI_RANK / PMI_SIZE         MPI_LOCALRANKID /             not when PALS_RANKID
                                          MPI_LOCALNRANKS               is set (Cray PMI)
pals          PALS_RANKID / PMI_SIZE      PALS_LOCAL_RANKID /           node PALS_NODEID,
                                          PMI_LOCAL_SIZE                job key PALS_APID
pmix          PMIX_RANK / -               - / -                         needs a Slurm step
============  ==========================  ============================  =====================

OMPI_COMM_WORLD_NODE_RANK is *not* the node index (it is the rank among all jobs' processes on
the node) and is not used. Cray PALS (``mpiexec`` on HPE systems) sets PALS_RANKID,
PALS_LOCAL_RANKID and PALS_NODEID, and Cray PMI adds PMI_RANK, PMI_SIZE, PMI_LOCAL_RANK and
PMI_LOCAL_SIZE (as read in flux-coral2's cray_pals shell plugin and in job scripts for ALCF
Polaris / Aurora); PALS therefore also matches MPICH's PMI_RANK and is told apart by
PALS_RANKID. Slurm's ``srun --mpi=cray_shasta`` (Perlmutter, LUMI) sets PALS_RANKID and
PALS_NODEID but no sizes, and ``srun --mpi=pmix`` only PMIX_RANK: the Slurm step supplies the
rest (see below).

Two ways of starting ranks are told apart:

* ``srun`` started every rank directly (``srun --mpi=pmix|pmi2|cray_shasta``): the process
  is in a Slurm step whose SLURM_PROCID is the MPI rank and whose task count is the MPI world
  size (when the launcher exports one). Hosts, tasks per node, node index and master node then
  come from the step, as for the ``slurm`` source; the launcher's own local rank and size
  are used when it sets them.
* ``mpirun`` / ``mpiexec`` started the ranks (possibly inside a Slurm allocation, where
  SLURM_PROCID belongs to mpirun's daemon, not to the rank): the host list is unknown, so
  ``hosts`` is empty and ``master_node`` is "" (rank 0 publishes its address at run time).
  The node index and count are derived as ``rank // local_size`` and
  ``ceil(world_size / local_size)``, which assumes the default by-slot mapping with the same
  number of ranks on every node (``mpirun --map-by node`` or uneven nodes break it).
  PALS_NODEID is used where set. PMIx without a Slurm step is an error: nothing says how
  many ranks there are.

An exported MASTER_ADDR / MASTER_PORT wins in both cases.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from ddpimg.errors import LauncherError
from ddpimg.topology._env import batch_job_id, read_int, read_master, read_optional_int
from ddpimg.topology.model import Env, Origin, Topology
from ddpimg.topology.slurm import in_slurm_step, resolve_step, step_rank_and_size


# The two tables are NamedTuples rather than frozen dataclasses: they are constants read once,
# and a dataclass generates its methods when the module is imported, which every rank's
# ``ddpimg env`` would pay at start-up.
class MpiLayout(NamedTuple):
    """The variables that place a rank: world size, rank on its node, ranks on its node."""

    world_size: str
    local_rank: str
    local_world_size: str


class MpiVariables(NamedTuple):
    """The variables one MPI launcher sets for each rank."""

    rank: str
    # None when the launcher exports no sizes at all (PMIx).
    layout: MpiLayout | None
    node_rank: str | None = None
    # Identical on every rank of one launch and different between launches.
    job_keys: tuple[str, ...] = ()
    # Set by a launcher that also sets ``rank`` but comes later in the detection order.
    not_with: tuple[str, ...] = ()


class MpiSource:
    """One MPI launcher, described by its table of variables."""

    def __init__(self, name: str, variables: MpiVariables) -> None:
        self.name = name
        self.variables = variables

    def __repr__(self) -> str:
        return f"MpiSource({self.name!r})"

    def detect(self, env: Env) -> bool:
        names = self.variables
        return names.rank in env and not any(marker in env for marker in names.not_with)

    def read(self, env: Env) -> tuple[Topology, Origin]:
        names = self.variables
        rank = read_int(env, names.rank, self.name)
        layout = names.layout
        # Optional here: srun --mpi=cray_shasta sets PALS_RANKID without PMI_SIZE.
        world_size = (
            None if layout is None else read_optional_int(env, layout.world_size, self.name)
        )
        if _started_by_srun(env, rank, world_size):
            topology, origin = self._from_slurm_step(env, rank)
        elif layout is None:
            raise self._needs_slurm_step(env, rank)
        else:
            world_size = read_int(env, layout.world_size, self.name)
            topology, origin = self._from_mpirun(env, rank, world_size, layout)
        # Every MPI launch lets rank 0 broadcast its address (runtime/mpi_master.py).
        return dataclasses.replace(topology, master_via_mpi=True), origin

    def _from_slurm_step(self, env: Env, rank: int) -> tuple[Topology, dict[str, str]]:
        step, origin = resolve_step(env)
        origin["rank"] = self.variables.rank
        local_rank, local_world_size = step.local_rank, step.local_world_size
        layout = self.variables.layout
        if layout is not None:
            if layout.world_size in env:
                origin["world_size"] = layout.world_size
            # srun --mpi=pmi2 exports PMI_RANK / PMI_SIZE but no local variables: keep Slurm's.
            given_rank = read_optional_int(env, layout.local_rank, self.name)
            if given_rank is not None:
                local_rank = given_rank
                origin["local_rank"] = layout.local_rank
            given_size = read_optional_int(env, layout.local_world_size, self.name)
            if given_size is not None:
                local_world_size = given_size
                origin["local_world_size"] = layout.local_world_size
        topology = dataclasses.replace(
            step,
            source=self.name,
            rank=rank,
            local_rank=local_rank,
            local_world_size=local_world_size,
        )
        return topology, origin

    def _from_mpirun(
        self, env: Env, rank: int, world_size: int, layout: MpiLayout
    ) -> tuple[Topology, dict[str, str]]:
        names = self.variables
        local_rank = read_int(env, layout.local_rank, self.name)
        local_world_size = read_int(env, layout.local_world_size, self.name)
        origin = {
            "rank": names.rank,
            "world_size": layout.world_size,
            "local_rank": layout.local_rank,
            "local_world_size": layout.local_world_size,
            "node_rank": f"{names.rank} // {layout.local_world_size}",
            "num_nodes": f"{layout.world_size} / {layout.local_world_size}, rounded up",
        }
        # A zero local size is reported by the consistency check; do not divide by it here.
        per_node = max(local_world_size, 1)
        node_rank = rank // per_node
        if names.node_rank is not None:
            given = read_optional_int(env, names.node_rank, self.name)
            if given is not None:
                node_rank = given
                origin["node_rank"] = names.node_rank
        master = read_master(env, self.name)
        job_key = next(
            (env[key].strip() for key in names.job_keys if env.get(key, "").strip()),
            batch_job_id(env),
        )
        topology = Topology(
            source=self.name,
            rank=rank,
            world_size=world_size,
            local_rank=local_rank,
            local_world_size=local_world_size,
            node_rank=node_rank,
            num_nodes=-(-world_size // per_node),
            master_node=master.addr or "",
            master_addr_explicit=master.addr is not None,
            master_port=master.port,
            job_key=job_key,
            job_id=batch_job_id(env),
        )
        return topology, origin

    def _needs_slurm_step(self, env: Env, rank: int) -> LauncherError:
        found = (
            f"this Slurm step's SLURM_PROCID={env.get('SLURM_PROCID', '')} is not this rank, "
            "so srun did not start the ranks"
            if in_slurm_step(env)
            else "this is not a Slurm step (SLURM_STEP_ID is not set)"
        )
        return LauncherError(
            f"{self.name}: {self.variables.rank}={rank} is set, but {self.name} puts no world "
            f"size in the environment and {found}",
            "start the ranks with srun --mpi=pmix (Slurm then exports the sizes), or with "
            "mpirun / torchrun, which export them",
        )


def _started_by_srun(env: Env, rank: int, world_size: int | None) -> bool:
    """True when the Slurm step's task is this very rank (srun launched the ranks itself)."""
    if not in_slurm_step(env):
        return False
    step_rank, step_size = step_rank_and_size(env)
    return step_rank == rank and (world_size is None or step_size == world_size)


OPENMPI = MpiSource(
    "openmpi",
    MpiVariables(
        rank="OMPI_COMM_WORLD_RANK",
        layout=MpiLayout(
            "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"
        ),
        job_keys=("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"),
    ),
)
MVAPICH = MpiSource(
    "mvapich",
    MpiVariables(
        rank="MV2_COMM_WORLD_RANK",
        layout=MpiLayout(
            "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"
        ),
    ),
)
MPICH = MpiSource(
    "mpich",
    MpiVariables(
        rank="PMI_RANK",
        layout=MpiLayout("PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
        not_with=("PALS_RANKID",),
    ),
)
PALS = MpiSource(
    "pals",
    MpiVariables(
        rank="PALS_RANKID",
        layout=MpiLayout("PMI_SIZE", "PALS_LOCAL_RANKID", "PMI_LOCAL_SIZE"),
        node_rank="PALS_NODEID",
        job_keys=("PALS_APID",),
    ),
)
PMIX = MpiSource("pmix", MpiVariables(rank="PMIX_RANK", layout=None))

# In detection order: MVAPICH also sets PMI_RANK (so it precedes MPICH), Open MPI also sets
# PMIX_RANK (so it precedes PMIx).
MPI_SOURCES = (OPENMPI, MVAPICH, MPICH, PALS, PMIX)
