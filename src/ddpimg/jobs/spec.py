"""The resolved job a batch script is rendered from (:class:`JobSpec`), and where each of its
values came from: ``flag``, the job file's path, ``site NAME`` or ``default``.

:func:`ddpimg.jobs.resolve.resolve_job` builds it (precedence documented there); its fields
are described in :data:`ddpimg.jobs.fields.FIELDS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpimg.jobs.fields import FIELD_BY_NAME
from ddpimg.jobs.slurm_time import parse_slurm_time

FLAG = "flag"
DEFAULT = "default"


@dataclass(frozen=True)
class JobSpec:
    """Everything the renderer needs, resolved. ``sources`` says where each value came from:
    ``flag``, the job file's path, ``site NAME`` or ``default``."""

    site: str  # profile name, or the path given to --site; passed on as `train --site`
    nodes: int
    gpus_per_node: int
    gpu_type: str
    gpu_request: str
    gpu_vendor: str
    ntasks_per_node: int
    cpus_per_task: int
    time: str
    partition: str
    account: str
    constraint: str
    job_name: str
    array: str
    output: str
    image: str
    runtime: str
    launch: str
    binds: tuple[str, ...]
    signal_seconds: int
    max_restarts: int
    sbatch_options: tuple[str, ...]
    command: tuple[str, ...]
    sources: tuple[tuple[str, str], ...] = ()

    def source(self, name: str) -> str:
        return dict(self.sources).get(name, DEFAULT)

    def origin(self, name: str) -> str:
        """How a message names where ``name`` was set: ``--nodes 3``, ``job.toml: nodes = 3``."""
        value = getattr(self, name)
        source = self.source(name)
        field = FIELD_BY_NAME[name]
        if source == FLAG:
            return f"{field.option} {value}"
        if source == DEFAULT:
            return f"{field.option} {value} (the default)"
        key = f"job.{name}" if source.startswith("site ") else name
        return f"{source}: {key} = {value!r}"

    @property
    def gpus_requested(self) -> bool:
        return self.gpu_request != "none" and self.gpus_per_node > 0

    @property
    def ranks_per_node(self) -> int:
        """Training processes per node: the tasks, or torchrun's workers in its one task."""
        if self.launch == "torchrun":
            return max(self.gpus_per_node, 1)
        return self.ntasks_per_node

    @property
    def cpus_per_slurm_task(self) -> int:
        """``--cpus-per-task``: a torchrun task hosts all of its node's ranks."""
        return self.cpus_per_task * (self.ranks_per_node if self.launch == "torchrun" else 1)

    @property
    def time_seconds(self) -> int | None:
        """The time limit in seconds; None when unset or unlimited."""
        return parse_slurm_time(self.time, self.origin("time")) if self.time else None


def counted(number: int, noun: str) -> str:
    """``1 GPU``, ``4 GPUs``: for messages and the script's comments."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
