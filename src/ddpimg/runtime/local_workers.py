"""``--nproc-per-node N``: this process becomes the node's launcher and starts N workers
through torch.distributed.launcher's API (the same agent as torchrun), for every command that
runs ranks (``cli/launch.py``'s start-up)."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Sequence

from ddpimg import exitcodes
from ddpimg.errors import LauncherError
from ddpimg.plan import RANK_VARIABLES, LaunchPlan

# The signals torch elastic's agent handles (its default) by shutting the workers down.
ELASTIC_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
# Exit statuses a worker explains itself before it exits ("ddpimg: error: ...", "ddpimg:
# preempted ...", "ddpimg: interrupted ..."): torch's agent's own line about them
# ("failed (exitcode: 75) local_rank: 0 ...") would read as a second, worse failure.
SELF_EXPLAINED = frozenset({
    exitcodes.USAGE, exitcodes.RENDEZVOUS_FAILED, exitcodes.CHECK_FAILED,
    exitcodes.RANK_LOST, exitcodes.PREEMPTED, exitcodes.INTERRUPTED,
})  # fmt: skip
ELASTIC_PROCESS_LOGGER = "torch.distributed.elastic.multiprocessing.api"


class _ExplainedExits(logging.Filter):
    """Drops the agent's "failed (exitcode: N)" record when N is in SELF_EXPLAINED; an
    exit the worker did not explain (a crash, a signal, a script's own 1) keeps it."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        explained = args[:1] and args[0] in SELF_EXPLAINED
        return not (str(record.msg).startswith("failed (exitcode: ") and explained)


# A worker's status that only follows from another's failure or from outside: the agent
# stops the other workers once one failed (a preemption signal to them), a rank gives up on
# a lost one, Ctrl-C. Any other status a worker exits with is its own failure.
_CONSEQUENCES = (exitcodes.RANK_LOST, exitcodes.PREEMPTED, exitcodes.INTERRUPTED)


def launcher_status(codes: list[int]) -> int:
    """The launcher's exit status from its failed workers' (in rank order): a worker's own
    failure (1, 2, 3, ...) first, whatever the others then exited with; else a lost rank,
    then preempted, then interrupted; a worker killed by a signal alone (negative) reads as
    a failed run."""
    own = [code for code in codes if code > 0 and code not in _CONSEQUENCES]
    if own:
        return own[0]
    return next((status for status in _CONSEQUENCES if status in codes), exitcodes.TRAINING_FAILED)


def launch_local_workers(
    plan: LaunchPlan,
    nproc: int,
    program: Sequence[str],
    timeout_s: float,
    preempt_signals: Sequence[str] = (),
) -> int:
    """One launcher per node (this process) starts ``nproc`` workers running ``python
    PROGRAM`` with the static rendezvous; the launcher's own rank and world size become the
    node rank and node count. ``preempt_signals`` (names without SIG) go to the workers
    instead of stopping them. Returns the first failing worker's exit status, else 0."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from ddpimg import runtime
    from ddpimg.runtime.children import forward_to_children
    from ddpimg.runtime.store_auth import KEY_VARIABLE, new_key_hex

    topo = plan.topology
    if topo.local_world_size > 1:
        raise LauncherError(
            f"--nproc-per-node {nproc} with {topo.local_world_size} tasks on this "
            f"node ({topo.source}): each task would start its own workers",
            hint="run one task per node (srun --ntasks-per-node=1) with --nproc-per-node, or "
            "drop --nproc-per-node and let srun start one task per GPU",
        )
    runtime.check_interfaces(plan)
    master = runtime.apply_plan(plan)
    for name in RANK_VARIABLES:  # the launcher's own placement must not leak into workers
        os.environ.pop(name, None)
    # torch elastic's agent turns the signals it handles into a shutdown of the workers that
    # loses their exit statuses; the preemption signals go to the workers instead, which
    # checkpoint and exit with status 75, and Ctrl-C (SIGINT), on which they record status
    # 130 and exit with it; the agent reports that status.
    forwarded = [*preempt_signals, "INT"]
    forward_to_children(forwarded)
    if topo.world_size == 1:
        # The only launcher: its workers share a store key through the environment
        # (ddpimg.runtime.store_auth), which needs no collective.
        os.environ.setdefault(KEY_VARIABLE, new_key_hex())
    port = runtime.rendezvous_port(plan)
    # The agent's log directory (workers' error files). Without one, torch makes a
    # /tmp/torchelastic_* directory per launch and leaves it behind; this one is removed.
    log_dir = tempfile.TemporaryDirectory(prefix="ddpimg-workers-")
    config = LaunchConfig(
        logs_specs=DefaultLogsSpecs(log_dir=log_dir.name),
        min_nodes=topo.world_size,
        max_nodes=topo.world_size,
        nproc_per_node=nproc,
        run_id=topo.job_key or f"ddpimg-{os.getpid()}",
        rdzv_backend="static",
        rdzv_endpoint=f"{master}:{port}",
        rdzv_configs={"rank": topo.rank, "timeout": int(timeout_s)},
        max_restarts=0,
        monitor_interval=0.5,
        signals_to_handle=",".join(
            name for name in ELASTIC_SIGNALS if name.removeprefix("SIG") not in forwarded
        ),
    )
    logging.getLogger(ELASTIC_PROCESS_LOGGER).addFilter(_ExplainedExits())
    try:
        elastic_launch(config, sys.executable)(*program)
    except ChildFailedError as err:
        return launcher_status([err.failures[rank].exitcode for rank in sorted(err.failures)])
    finally:
        log_dir.cleanup()
    return exitcodes.OK
