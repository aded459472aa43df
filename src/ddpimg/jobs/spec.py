"""The resolved job a batch script is rendered from (:class:`JobSpec`), and where each of its
values came from: ``flag``, the job file's path, ``site NAME`` or ``default``.

:func:`ddpimg.jobs.resolve.resolve_job` builds it (precedence documented there); its fields
are described in :data:`ddpimg.jobs.fields.FIELDS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpimg.jobs.fields import FIELD_BY_NAME
from ddpimg.slurm_units import parse_slurm_time

FLAG = "flag"
DEFAULT = "default"


@dataclass(frozen=True)
class JobSpec:
    """Everything the renderer needs, resolved. ``sources`` says where each value came from:
    ``flag``, the job file's path, ``site NAME`` or ``default``."""

    site: str  # profile name, or the path given to --site; passed on as `train --site`
    nodes: int  # at most this many (exactly, without a range)
    min_nodes: int  # with a range (ddpimg.jobs.noderange), at least this many; else 0
    gpus_per_node: int
    gpu_type: str
    gpu_request: str
    gpu_vendor: str
    ntasks_per_node: int
    cpus_per_task: int
    time: str
    partition: str
    qos: str
    account: str
    constraint: str
    mem: str
    cpu_bind: str
    job_name: str
    array: str
    output: str
    image: str
    runtime: str
    launch: str
    binds: tuple[str, ...]
    signal_seconds: int
    max_restarts: int
    data_image: str
    stage_data: str
    addons: tuple[str, ...]  # add-on files (ddpimg.jobs.addons)
    ddpimg_from: str  # ddpimg installed for a site's own image (ddpimg.jobs.foreign)
    local_dir: str
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
    def node_range(self) -> bool:
        return 0 < self.min_nodes < self.nodes

    @property
    def nodes_request(self) -> str:
        """``#SBATCH --nodes=``: ``2`` or the range ``2-3``."""
        return f"{self.min_nodes}-{self.nodes}" if self.node_range else str(self.nodes)

    @property
    def step_nodes(self) -> str:
        """A step's ``srun --nodes=``: the nodes the job got, which a range leaves to Slurm."""
        return '"${SLURM_JOB_NUM_NODES}"' if self.node_range else str(self.nodes)

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
    def cpu_bind_applies(self) -> bool:
        """Whether ``cpu_bind`` fits the step: a list of masks or CPUs (``mask_cpu:A,B``,
        ``map_cpu:...``) has one entry per task, so it only fits that many tasks per node."""
        if not self.cpu_bind:
            return False
        entries = bind_entries(self.cpu_bind)
        return entries is None or entries == self.ntasks_per_node

    @property
    def time_seconds(self) -> int | None:
        """The time limit in seconds; None when unset or unlimited."""
        return parse_slurm_time(self.time, self.origin("time")) if self.time else None


def bind_entries(cpu_bind: str) -> int | None:
    """How many tasks an srun ``--cpu-bind`` value binds one by one (``mask_cpu:A,B``: 2);
    None for a policy that fits any number (``cores``)."""
    for kind in ("mask_cpu:", "map_cpu:", "mask_ldom:", "map_ldom:"):
        if kind in cpu_bind:
            return len(cpu_bind.split(kind, 1)[1].split(","))
    return None


def counted(number: int, noun: str) -> str:
    """``1 GPU``, ``4 GPUs``: for messages and the script's comments."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
