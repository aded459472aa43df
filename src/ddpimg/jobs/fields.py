"""The job's settings, written once as a table: each field's flag, job-file key, type,
default, help text, and which values it accepts.

``ddpimg sbatch``'s flags, the job file's keys and :class:`~ddpimg.jobs.spec.JobSpec` all
follow :data:`FIELDS`. A value's type is checked where it is read (argparse, the job file's
loader); :func:`check_value` then checks it against its field: ranges, choices, no whitespace
where an ``#SBATCH`` line would break, and the field's own ``check``. Whether the job as a
whole makes sense is :mod:`ddpimg.jobs.checks`' business.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ddpimg.errors import JobError
from ddpimg.shellpath import expandable_path_problem
from ddpimg.site.container import DEFAULT_RUNTIME, RUNTIMES
from ddpimg.slurm_units import parse_slurm_memory, parse_slurm_time
from ddpimg.tomlfile import INTEGER, STRING, STRING_LIST, Kind

LAUNCHES = ("srun", "torchrun")
GPU_REQUESTS = ("gres", "gpus-per-node", "none")
GPU_VENDORS = ("nvidia", "amd")
# Slurm stores the --signal lead time in 16 bits.
MAX_SIGNAL_SECONDS = 65535
_NO_SPACE = re.compile(r"[^\s\x00-\x1f\x7f]+\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TOML_KINDS: Mapping[type, Kind] = {int: INTEGER, str: STRING, list: STRING_LIST}


def _slurm_time(text: str, where: str) -> None:
    parse_slurm_time(text, where)


def _slurm_memory(text: str, where: str) -> None:
    parse_slurm_memory(text, where)


def _single_bind(text: str, where: str) -> None:
    if "," in text:
        raise JobError(
            f"{where}: {text!r} contains ',', which separates binds for apptainer",
            hint="give each bind on its own (--bind A --bind B)",
        )


def _expandable_path(text: str, where: str) -> None:
    problem = expandable_path_problem(text)
    if problem is not None:
        raise JobError(f"{where}: {problem}", hint="e.g. --local-dir '$LOCAL_SCRATCH'")


def _absolute(text: str, where: str) -> None:
    if text and (not text.startswith("/") or "," in text or ":" in text):
        raise JobError(
            f"{where}: {text!r} is not an absolute path without ',' and ':'",
            hint="the tasks find it at the same path on every node (it is bound into the "
            "container): give it from /",
        )


def _addon_file(text: str, where: str) -> None:
    from ddpimg.addon.sitepath import mount_name, valid_name

    if "," in text or ":" in text or not valid_name(mount_name(text)):
        raise JobError(
            f"{where}: {text!r} is not an add-on file (NAME.addon.sqsh, NAME of letters, "
            "digits, '.', '_' and '-'; no ',' or ':' in the path)",
            hint="give the file ddpimg addon build wrote; NAME becomes /opt/ddpimg/addons/NAME",
        )


def _sbatch_option(text: str, where: str) -> None:
    if not text.startswith("-"):
        raise JobError(
            f"{where}: {text!r} is not an sbatch option",
            hint="write it as on the sbatch command line, e.g. --qos=normal",
        )


@dataclass(frozen=True)
class Field:
    """One job setting: flag ``--name-with-dashes``, job-file key ``name``, JobSpec field.

    ``kind`` is int, str or list (of strings). ``from_profile``: the site profile's
    ``[job]`` section has a key of the same name. ``spaces``: whitespace is allowed (a word
    of the command line, quoted there); otherwise it would break an ``#SBATCH`` line.
    ``check``: the field's own rule for a string (each item of a list), given the value and
    where it came from; it raises :class:`~ddpimg.errors.JobError`.
    """

    name: str
    kind: type
    default: Any
    help: str
    metavar: str = ""
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    from_profile: bool = False
    spaces: bool = False
    flag: str = ""  # the flag when it differs from --name (lists: one item per flag)
    merge: bool = False  # a list every layer adds to, instead of replacing
    check: Callable[[str, str], None] | None = None

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def toml_kind(self) -> Kind:
        """The value's type as the job file writes it."""
        return _TOML_KINDS[self.kind]


FIELDS: tuple[Field, ...] = (
    Field(
        "nodes",
        int,
        0,
        "nodes to allocate (required); MIN-MAX: Slurm may start the job, and a requeued one, on "
        "any count in the range (sets --min-nodes)",
        "N|MIN-MAX",
        minimum=1,
    ),
    Field(
        "min_nodes",
        int,
        0,
        "the fewest nodes the job may start on (a range up to --nodes; 0: exactly --nodes)",
        "N",
        minimum=0,
    ),
    Field(
        "gpus_per_node",
        int,
        0,
        "GPUs per node; with --gpu-request none, the tasks per node",
        "G",
        minimum=0,
        from_profile=True,
    ),
    Field("gpu_type", str, "", "GPU type in the request, e.g. a100", "TYPE", from_profile=True),
    Field(
        "gpu_request",
        str,
        "gres",
        "how GPUs are requested: --gres=gpu[:TYPE]:G, --gpus-per-node, or not at all "
        "(CPU clusters, the test suite)",
        choices=GPU_REQUESTS,
        from_profile=True,
    ),
    Field(
        "gpu_vendor",
        str,
        "nvidia",
        "apptainer exec --nv (nvidia) or --rocm (amd)",
        choices=GPU_VENDORS,
        from_profile=True,
    ),
    Field(
        "ntasks_per_node",
        int,
        0,
        "tasks per node; 0: one per GPU with --launch srun, one with --launch torchrun",
        "N",
        minimum=0,
    ),
    Field("cpus_per_task", int, 1, "CPUs per rank", "C", minimum=1, from_profile=True),
    Field(
        "time",
        str,
        "",
        "time limit (Slurm syntax: MM, HH:MM:SS, D-HH:MM, ...)",
        "T",
        check=_slurm_time,
    ),
    Field("partition", str, "", "partition", "P", from_profile=True),
    Field("qos", str, "", "quality of service (--qos)", "QOS", from_profile=True),
    Field("account", str, "", "account (project) to charge", "A"),
    Field("constraint", str, "", "node features (--constraint)", "C", from_profile=True),
    Field(
        "mem",
        str,
        "",
        "memory per node, Slurm's size (320G; 0: all of it); default: the site's memory per "
        "GPU times the GPUs",
        "SIZE",
        check=_slurm_memory,
    ),
    Field(
        "cpu_bind",
        str,
        "",
        "srun --cpu-bind, e.g. one core mask per task",
        "BIND",
        from_profile=True,
    ),
    Field("job_name", str, "ddpimg", "job name (%x in --output)", "NAME"),
    Field("array", str, "", "job array indices, e.g. 0-3", "SPEC"),
    Field("output", str, "", "log file pattern (default: %x-%j.out, arrays %x-%A_%a.out)", "PAT"),
    Field(
        "image",
        str,
        "",
        "container image: a .sif file (apptainer, singularity), a tag (docker, podman-hpc) or "
        "a .sqsh file (pyxis, edf); default: the site's flavour, named by ddpimg.imagenames",
        "IMAGE",
        spaces=True,
    ),
    Field(
        "runtime",
        str,
        DEFAULT_RUNTIME,
        "how each task starts the image",
        choices=tuple(RUNTIMES),
        from_profile=True,
    ),
    Field(
        "launch",
        str,
        "srun",
        "srun: one task per GPU; torchrun: one task per node starting G workers",
        choices=LAUNCHES,
    ),
    Field(
        "binds",
        list,
        (),
        "host path bound into the container (repeat; adds to the site's)",
        "PATH",
        from_profile=True,
        flag="--bind",
        merge=True,
        check=_single_bind,
    ),
    Field(
        "signal_seconds",
        int,
        300,
        "send USR2 this many seconds before the time limit, to checkpoint",
        "S",
        minimum=1,
        maximum=MAX_SIGNAL_SECONDS,
    ),
    Field("max_restarts", int, 3, "requeue a preempted job at most this often", "N", minimum=0),
    Field(
        "data_image",
        str,
        "",
        "a squashfs image of the dataset (mksquashfs of `ddpimg data pack`'s output), mounted "
        "read-only at /data in the container (apptainer, singularity); train gets --data /data",
        "FILE",
    ),
    Field(
        "stage_data",
        str,
        "",
        "a dataset directory copied once per node to --local-dir before training (and removed "
        "after); train gets --data the copy",
        "DIR",
    ),
    Field(
        "addons",
        list,
        (),
        "an add-on (ddpimg addon build's NAME.addon.sqsh), mounted read-only at "
        "/opt/ddpimg/addons/NAME after the image's own packages (repeat; adds to the site's)",
        "FILE",
        from_profile=True,
        flag="--addon",
        merge=True,
        check=_addon_file,
    ),
    Field(
        "ddpimg_from",
        str,
        "",
        "ddpimg installed for the --image (a virtual environment made with "
        "--system-site-packages over its Python): the step runs DIR/bin/train in the image, "
        "keeping the image's own environment",
        "DIR",
        check=_absolute,
    ),
    Field(
        "local_dir",
        str,
        "${TMPDIR:-/tmp}",
        "node-local directory for --stage-data (expanded on the node: $NAME, ${NAME} and "
        "${NAME:-DEFAULT} allowed)",
        "DIR",
        from_profile=True,
        check=_expandable_path,
    ),
    Field(
        "sbatch_options",
        list,
        (),
        "extra #SBATCH option, written with = because it starts with a dash: "
        "--sbatch-option=--qos=normal (repeat)",
        "OPT",
        spaces=True,
        flag="--sbatch-option",
        merge=True,
        check=_sbatch_option,
    ),
    Field("command", list, (), "the training command (job file only; else after --)", spaces=True),
)
FIELD_BY_NAME: Mapping[str, Field] = {f.name: f for f in FIELDS}


def check_value(field: Field, value: Any, where: str) -> None:
    """Raise JobError when ``value`` (one item, for a list field) does not suit ``field``;
    ``where`` names where it was given (``--nodes``, ``job.toml: nodes``)."""
    if field.choices and value not in field.choices:
        raise JobError(
            f"{where}: '{value}' is not one of {', '.join(field.choices)}",
            hint=f"{field.option} {field.choices[0]}",
        )
    if field.kind is int:
        if field.minimum is not None and value < field.minimum:
            raise JobError(
                f"{where}: must be at least {field.minimum}, found {value}",
                hint=field.help,
            )
        if field.maximum is not None and value > field.maximum:
            raise JobError(
                f"{where}: must be at most {field.maximum}, found {value}",
                hint=field.help,
            )
        return
    text = str(value)
    if field.spaces:
        if _CONTROL.search(text):
            raise JobError(
                f"{where}: {text!r} contains a control character (e.g. a newline)",
                hint="one value per line of the script; remove the control character",
            )
    elif text and not _NO_SPACE.fullmatch(text):
        raise JobError(
            f"{where}: {text!r} contains whitespace or a control character",
            hint=f"it becomes part of an #SBATCH line or a list; {field.help}",
        )
    if field.check is not None:
        field.check(text, where)
