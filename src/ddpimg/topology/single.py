"""One process, no launcher: a laptop, a CI job, a one-task batch script.

Rank 0 of 1 on node 0 of 1. The host list is unknown and ``master_node`` is "", so the site
profile's rule decides the rendezvous address (normally the loopback). An exported
MASTER_ADDR / MASTER_PORT wins, as for every source.

A WORLD_SIZE above 1 without any launcher's markers, and without the rest of the env://
contract (``topology/env_contract.py``), means a hand-made multi-process launch that ddpimg
cannot place (which rank is this one?); it is refused rather than silently run as a single
process.
"""

from __future__ import annotations

from ddpimg.errors import LauncherError
from ddpimg.topology._env import batch_job_id, parse_int, read_master, read_optional_int
from ddpimg.topology.env_contract import CONTRACT
from ddpimg.topology.model import Env, Origin, Topology
from ddpimg.topology.slurm import in_slurm_step

NAME = "single"


class SingleSource:
    """No launcher: always detected, so it comes last in the detection order."""

    name = NAME

    def detect(self, env: Env) -> bool:
        return True

    def read(self, env: Env) -> tuple[Topology, Origin]:
        _refuse_bare_batch_script(env)
        world_size = read_optional_int(env, "WORLD_SIZE", NAME)
        if world_size is not None and world_size > 1:
            missing = [name for name in CONTRACT if name not in env]
            raise LauncherError(
                f"{NAME}: WORLD_SIZE={world_size} is set, but no launcher (torchrun, srun, "
                f"mpirun) started this process and {', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not set, so its rank is unknown",
                "launch the processes with torchrun, srun or mpirun; or export all of "
                f"{', '.join(CONTRACT)} for each process (the env:// contract); or unset "
                "WORLD_SIZE to run one process",
            )
        master = read_master(env, NAME)
        topology = Topology(
            source=NAME,
            rank=0,
            world_size=1,
            local_rank=0,
            local_world_size=1,
            node_rank=0,
            num_nodes=1,
            master_node=master.addr or "",
            master_addr_explicit=master.addr is not None,
            master_port=master.port,
            job_id=batch_job_id(env),
            all_local=True,
        )
        return topology, {}


def _refuse_bare_batch_script(env: Env) -> None:
    """Refuse a multi-task batch allocation that runs the command once, outside srun."""
    if "SLURM_JOB_ID" not in env or in_slurm_step(env) or "SLURM_NTASKS" not in env:
        return
    tasks = parse_int("SLURM_NTASKS", env["SLURM_NTASKS"], "slurm")
    if tasks > 1:
        raise LauncherError(
            f"train was started once inside a batch script of {tasks} tasks "
            f"(SLURM_NTASKS={tasks}, no SLURM_STEP_ID)",
            "launch it with srun: srun train ... (or ask for a single task with --ntasks=1)",
        )
