"""``train --script FILE [ARGS]``: the user's own script, with the resolved environment.

``train`` replaces itself with the script (exec, same PID) instead of running it as a child:

* Signals reach exactly one process, the script. Slurm delivers a step's signals to every
  process of the task (``scancel --signal``, ``--signal=USR1@90``), so a parent that also
  passed them on would deliver them twice, and a parent without a handler for SIGUSR1
  (Lightning's auto-requeue signal) would die of it and take the step down. ddpimg's own
  preemption handling (checkpoint, exit 75) belongs to the bundled trainers and is not
  installed for a script: the script's handlers alone act.
* Under ``mpirun`` the script is the MPI rank: its ``MPI_Init`` (mpi4py, Lightning's MPI
  detection, Horovod, DeepSpeed's discovery) finds the launcher's identity unused. Where
  rank 0 must publish the master address over MPI (no host list), that happens in the
  script's own process, before the script runs (``python -m ddpimg.runtime.user_script``):
  an MPI_Init in ``train`` itself would claim the rank, and the script's MPI_Init would then
  fail with ``ompi_rte_init failed``.

What the script gets beyond the plan's exports (``script_exports``): SLURM_NTASKS_PER_NODE
when a Slurm step places the same number of tasks on every node and srun did not export it
(``srun -n 2``): PyTorch Lightning refuses a SLURM_NTASKS without it ("You set
`--ntasks=2` ... HINT: Use `--ntasks-per-node=2`"), although the layout is well defined.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Mapping, Sequence

from ddpimg.plan import LaunchPlan

BOOT_MODULE = "ddpimg.runtime.user_script"


def script_exports(plan: LaunchPlan, env: Mapping[str, str]) -> dict[str, str]:
    """Variables a script gets on top of the plan's exports (see the module docstring)."""
    per_node = plan.topology.tasks_per_node
    if per_node and len(set(per_node)) == 1 and "SLURM_NTASKS_PER_NODE" not in env:
        return {"SLURM_NTASKS_PER_NODE": str(per_node[0])}
    return {}


def script_argv(plan: LaunchPlan, path: str, args: Sequence[str]) -> list[str]:
    """The command line that replaces ``train``: the script itself, or the boot module that
    first learns the master address over MPI."""
    if plan.needs_runtime_master:
        return [sys.executable, "-m", BOOT_MODULE, "--site", plan.site.path, path, *args]
    return [sys.executable, path, *args]


def _boot(argv: list[str]) -> None:
    """``--site PROFILE FILE [ARGS]``: publish rank 0's address, then run FILE as __main__."""
    from ddpimg.plan import short_hostname
    from ddpimg.runtime.mpi_master import broadcast_master_address
    from ddpimg.site.load import load_profile

    _, profile_path, path, *args = argv
    profile = load_profile(profile_path)
    os.environ["MASTER_ADDR"] = broadcast_master_address(profile, short_hostname())
    sys.argv = [path, *args]
    # As `python FILE` would have it: the script's directory first on the import path.
    sys.path[0] = os.path.dirname(os.path.abspath(path))
    runpy.run_path(path, run_name="__main__")
    _release_process_group()


def _release_process_group() -> None:
    """Destroy the default process group a script that returned left behind. This process
    initialised MPI for the broadcast, so mpi4py finalises it at exit, and that raced the
    backend's own threads: now and then a finished run aborted ("terminate called without an
    active exception", signal 6). Only after a normal return: after an error the peers may
    be gone, and tearing down could block."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    from ddpimg.cli import report_error
    from ddpimg.errors import DdpimgError

    try:
        _boot(sys.argv[1:])
    except DdpimgError as err:
        sys.exit(report_error(err))
