"""What ``train --script`` hands to the script's boot: the runtime options taken from
``train``'s flags and the launch plan, as JSON in one environment variable.

An environment variable rather than arguments: the script's own command line stays exactly
what the user wrote (``ps`` shows it, and Slurm's and MPI's tools with it), and it reaches
the workers that ``--nproc-per-node`` starts through torch's launcher unchanged. The boot
removes it before the script runs, so processes the script starts never see it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ddpimg.errors import LauncherError
from ddpimg.runs.names import DEFAULT_ROOT
from ddpimg.runtime.defaults import DEFAULT_TIMEOUT_S
from ddpimg.train.preempt_signals import DEFAULT_SIGNALS

ENV_VAR = "DDPIMG_SCRIPT_RUNTIME"
RESUME_AUTO = "auto"
RESUME_NONE = "none"


@dataclass(frozen=True)
class ScriptOptions:
    """The runtime a script gets, each part switchable off (docs/script-api.md).

    ``watch``: the stall watch (``--no-watch``); ``record``: manifest.json and metrics.jsonl
    in ``out`` (``--no-record``); ``integrations``: ddpimg's Hugging Face and Lightning
    callbacks (``--no-integrations``); ``preempt_signals``: the signals that mean "save and
    stop" (``--preempt-signals none``: none). ``resume``: ``auto`` continues a run that did
    not complete from its newest framework checkpoint, ``none`` never, a path from that
    checkpoint (given to the framework only when the script passes none itself).
    ``run_info``: the launch plan as ``ddpimg env --json`` prints it, for the manifest;
    ``master_via_mpi`` / ``site_path``: rank 0 publishes its address over MPI first.
    ``out``: ``--out``, or "" when the run takes a directory of its own under ``runs`` (the
    runs root: ``ddpimg.runs``), which rank 0 chooses at start.
    ``rank_is_task``: the topology's capability (srun started each rank as a Slurm task), from
    which the boot works out the rank's CPU share.
    ``log_to`` / ``tracker_options``: the trackers rank 0 writes to (``--log-to``) and the
    flags that name the run there (``ddpimg.trackers.TrackerOptions``' fields).
    """

    out: str = ""
    runs: str = DEFAULT_ROOT  # with out ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    watch: bool = True
    record: bool = True
    integrations: bool = True
    preempt_signals: tuple[str, ...] = DEFAULT_SIGNALS
    preempt_check_every: int = 10
    resume: str = RESUME_AUTO
    master_via_mpi: bool = False
    rank_is_task: bool = False
    site_path: str = ""
    run_info: Mapping[str, Any] = field(default_factory=dict)
    log_to: tuple[str, ...] = ()
    tracker_options: Mapping[str, str | None] = field(default_factory=dict)

    def to_environ(self) -> dict[str, str]:
        """The variable that carries these options to the boot."""
        fields = asdict(self) | {
            "run_info": dict(self.run_info),
            "tracker_options": dict(self.tracker_options),
        }
        return {ENV_VAR: json.dumps(fields)}

    @classmethod
    def pop_from(cls, environ: MutableMapping[str, str]) -> ScriptOptions:
        """The options ``train`` left in ``environ``, removed from it."""
        text = environ.pop(ENV_VAR, None)
        if text is None:
            raise LauncherError(
                f"{ENV_VAR} is not set: the script boot runs only under train --script",
                hint="train --script my_script.py [ARGS] (or srun/mpirun/torchrun train ...)",
            )
        try:
            fields = json.loads(text)
            fields["preempt_signals"] = tuple(fields["preempt_signals"])
            fields["log_to"] = tuple(fields["log_to"])
            return cls(**fields)
        except (ValueError, TypeError, KeyError) as err:
            raise LauncherError(
                f"{ENV_VAR} does not hold the options train writes ({err})",
                hint="leave the variable to train --script",
            ) from err
