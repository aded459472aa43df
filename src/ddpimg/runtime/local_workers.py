"""``--nproc-per-node N``: this process becomes the node's launcher and starts N workers
through torch.distributed.launcher's API (the same agent as torchrun), for every command that
runs ranks (``cli/launch.py``'s start-up)."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ddpimg import exitcodes
from ddpimg.endings.workers import LauncherVerdict, WorkerExit, local_verdict
from ddpimg.errors import LauncherError, report
from ddpimg.host import short_hostname
from ddpimg.plan import RANK_VARIABLES, LaunchPlan
from ddpimg.runtime.run_note import RUN_NOTE_VARIABLE, noted_run, record_verdict

# The signals torch elastic's agent handles (its default) by shutting the workers down.
ELASTIC_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
ELASTIC_PROCESS_LOGGER = "torch.distributed.elastic.multiprocessing.api"


class _AgentVerdicts(logging.Filter):
    """Drops the agent's own "failed (exitcode: N) local_rank: R" record: the launcher's
    verdict (``endings.workers``) replaces it, naming the rank, its host, and the signal
    with its usual cause; the agent's line would read as a second, different ending."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("failed (exitcode: ")


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
    logging.getLogger(ELASTIC_PROCESS_LOGGER).addFilter(_AgentVerdicts())
    note = Path(log_dir.name) / "run"
    os.environ[RUN_NOTE_VARIABLE] = str(note)
    try:
        elastic_launch(config, sys.executable)(*program)
    except ChildFailedError as err:
        host = short_hostname()
        # In the order the agent saw them end (endings.workers says why that matters).
        exits = [
            WorkerExit(rank, failure.exitcode, failure.pid, host, failure.timestamp)
            for rank, failure in err.failures.items()
        ]
        verdict = local_verdict(exits, script=_runs_script(program))
        _tell(verdict, noted_run(note))
        return verdict.status
    finally:
        os.environ.pop(RUN_NOTE_VARIABLE, None)
        log_dir.cleanup()
    return exitcodes.OK


def _runs_script(program: Sequence[str]) -> bool:
    return "ddpimg.script.boot" in program or "--script" in program


def _tell(verdict: LauncherVerdict, run: Path | None) -> None:
    """The launcher's last word: its verdict in the run's manifest.json, then on stderr."""
    if run is not None:
        record_verdict(run, verdict)
    if verdict.message is None:
        return
    if verdict.error:
        report(verdict.message, hint=verdict.hint)
    else:
        print(f"ddpimg: {verdict.message}", file=sys.stderr, flush=True)
