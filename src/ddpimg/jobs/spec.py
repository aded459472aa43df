"""The job a batch script is rendered from: its fields, where each value comes from, and the
TOML job file.

Precedence, highest first (each cell is tested in ``tests/jobs/test_spec.py``):

1. a command-line flag (``--nodes 2``);
2. the job file (``--config job.toml`` holding ``nodes = 2``);
3. the site profile's ``[job]`` section (GPUs per node, GPU type and request syntax, CPUs per
   task, partition, constraint, binds);
4. the built-in default in :data:`FIELDS`.

List fields (``binds``, ``sbatch_options``) are the exception: every layer adds to them, in
the order profile, job file, flags, so ``--bind /data`` keeps the site's file systems.

The profile itself is chosen by ``--site``, else the job file's ``site``, else the usual
``DDPIMG_SITE`` > auto-detection > ``generic`` (:func:`ddpimg.site.select_profile`).

Values are checked here (types, ranges, choices, Slurm time syntax, no whitespace where a
``#SBATCH`` line would break); whether the job as a whole makes sense is
:mod:`ddpimg.jobs.checks`' business.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ddpimg.errors import JobError
from ddpimg.jobs.flavour import default_image
from ddpimg.site.model import JobDefaults, SiteProfile
from ddpimg.site.select import select_profile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

RUNTIMES = ("apptainer", "docker", "none")
LAUNCHES = ("srun", "torchrun")
GPU_REQUESTS = ("gres", "gpus-per-node", "none")
GPU_VENDORS = ("nvidia", "amd")
DEFAULT_IMAGES = {"apptainer": "ddp.sif", "docker": "ddpimg:cpu", "none": ""}
# Slurm stores the --signal lead time in 16 bits.
MAX_SIGNAL_SECONDS = 65535
FLAG = "flag"
DEFAULT = "default"
_NO_SPACE = re.compile(r"[^\s\x00-\x1f\x7f]+\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SLURM_TIME = re.compile(
    r"(?:(?P<days>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
    r"|(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)"
    r"|(?P<mm>\d+):(?P<ss>\d+)"
    r"|(?P<minutes>\d+))\Z"
)
_UNLIMITED = ("UNLIMITED", "INFINITE")


@dataclass(frozen=True)
class Field:
    """One job setting: flag ``--name-with-dashes``, job-file key ``name``, JobSpec field.

    ``kind`` is int, str or list (of strings). ``from_profile``: the site profile's
    ``[job]`` section has a key of the same name. ``spaces``: whitespace is allowed (a word
    of the command line, quoted there); otherwise it would break an ``#SBATCH`` line.
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

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")


FIELDS: tuple[Field, ...] = (
    Field("nodes", int, 0, "nodes to allocate (required)", "N", minimum=1),
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
    Field("time", str, "", "time limit (Slurm syntax: MM, HH:MM:SS, D-HH:MM, ...)", "T"),
    Field("partition", str, "", "partition", "P", from_profile=True),
    Field("account", str, "", "account (project) to charge", "A"),
    Field("constraint", str, "", "node features (--constraint)", "C", from_profile=True),
    Field("job_name", str, "ddpimg", "job name (%x in --output)", "NAME"),
    Field("array", str, "", "job array indices, e.g. 0-3", "SPEC"),
    Field("output", str, "", "log file pattern (default: %x-%j.out, arrays %x-%A_%a.out)", "PAT"),
    Field(
        "image",
        str,
        "",
        "container image: a .sif file (apptainer) or a tag (docker); default: "
        + ", ".join(f"{k} {v}" for k, v in DEFAULT_IMAGES.items() if v),
        "IMAGE",
        spaces=True,
    ),
    Field("runtime", str, "apptainer", "how each task starts the image", choices=RUNTIMES),
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
        "sbatch_options",
        list,
        (),
        "extra #SBATCH option, written with = because it starts with a dash: "
        "--sbatch-option=--qos=normal (repeat)",
        "OPT",
        spaces=True,
        flag="--sbatch-option",
        merge=True,
    ),
    Field("command", list, (), "the training command (job file only; else after --)", spaces=True),
)
FIELD_BY_NAME: Mapping[str, Field] = {f.name: f for f in FIELDS}
# The job file may also name the site; it picks the profile, so it is not a JobSpec field.
JOB_FILE_KEYS = ("site", *FIELD_BY_NAME)


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


@dataclass(frozen=True)
class JobFile:
    """A TOML job file's values by key (checked for names and types, not yet for ranges)."""

    path: str
    values: Mapping[str, Any]

    @property
    def site(self) -> str | None:
        value = self.values.get("site")
        return str(value) if value is not None else None


def counted(number: int, noun: str) -> str:
    """``1 GPU``, ``4 GPUs``: for messages and the script's comments."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def parse_slurm_time(value: str, origin: str = "--time") -> int | None:
    """Seconds in a Slurm time limit (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS``); None for ``UNLIMITED`` / ``INFINITE``."""
    text = value.strip()
    if text.upper() in _UNLIMITED:
        return None
    match = _SLURM_TIME.fullmatch(text)
    if match is None:
        raise JobError(
            f"{origin}: '{value}' is not a Slurm time limit",
            hint="write minutes (90), HH:MM:SS (01:30:00) or D-HH:MM:SS (1-12:00:00)",
        )
    parts = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    if "minutes" in parts:
        return parts["minutes"] * 60
    if "mm" in parts:
        return parts["mm"] * 60 + parts["ss"]
    if "h" in parts:
        return parts["h"] * 3600 + parts["m"] * 60 + parts["s"]
    return parts["days"] * 86400 + parts["dh"] * 3600 + parts.get("dm", 0) * 60 + parts.get("ds", 0)


def load_job_file(path: str | Path) -> JobFile:
    """Read a TOML job file: top-level keys named like the flags (``gpus_per_node = 4``),
    plus ``site`` and ``command = ["train", ...]``. Unknown keys and wrong types are errors."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise JobError(
            f"cannot read job file {path}: {err.strerror or err}",
            hint="check the path given to --config",
        ) from err
    except UnicodeDecodeError as err:
        raise JobError(f"{path}: not UTF-8 text ({err})", hint="save it as UTF-8") from err
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise JobError(f"{path}: not valid TOML: {err}", hint="fix the TOML syntax there") from err
    for key, value in document.items():
        if key not in JOB_FILE_KEYS:
            closest = difflib.get_close_matches(key, JOB_FILE_KEYS, n=1)
            suggestion = f"did you mean '{closest[0]}'? " if closest else ""
            where = " (job files have no sections)" if isinstance(value, dict) else ""
            raise JobError(
                f"{path}: unknown key '{key}'{where}",
                hint=f"{suggestion}known keys: {', '.join(sorted(JOB_FILE_KEYS))}",
            )
        kind = FIELD_BY_NAME[key].kind if key in FIELD_BY_NAME else str
        if not _has_kind(value, kind):
            raise JobError(
                f"{path}: key '{key}' must be {_kind_name(kind)}, found {value!r} "
                f"({type(value).__name__})",
                hint=f"e.g. {key} = {_example(kind)}",
            )
    return JobFile(str(path), document)


def select_job_profile(
    env: Mapping[str, str], hostname: str, site_flag: str | None, job_file: JobFile | None
) -> tuple[SiteProfile, str | None]:
    """The profile for a job, and the site as the user named it (None: not named, so the
    profile's name is passed on). ``--site`` > the job file's ``site`` > ``DDPIMG_SITE`` >
    auto-detection > ``generic``."""
    named = site_flag or (job_file.site if job_file is not None else None)
    return select_profile(env, hostname, named).profile, named


def resolve_job(
    profile: SiteProfile,
    flags: Mapping[str, Any],
    job_file: JobFile | None = None,
    site: str | None = None,
) -> JobSpec:
    """The job from flags > job file > ``profile.job`` > defaults (lists: all layers added).

    ``flags`` holds only the flags given, by field name. ``site`` is what ``--site`` or the
    job file named; without it the profile's name is passed on to ``train``.
    """
    for name in flags:
        if name not in FIELD_BY_NAME:
            raise TypeError(f"resolve_job: no job field named {name!r}")
    site_values = _profile_values(profile.job)
    if profile.fabric.binds:  # the fabric's host paths come with the site's file systems
        site_values["binds"] = (*site_values.get("binds", ()), *profile.fabric.binds)
    layers: list[tuple[str, Mapping[str, Any]]] = [(f"site {profile.name}", site_values)]
    if job_file is not None:
        layers.append((job_file.path, {k: v for k, v in job_file.values.items() if k != "site"}))
    layers.append((FLAG, flags))

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for field in FIELDS:
        if field.merge:
            items: list[str] = []
            for source, layer in layers:
                for item in layer.get(field.name, ()):
                    _check_value(field, item, source)
                    if item not in items:
                        items.append(item)
            values[field.name] = tuple(items)
            continue
        values[field.name] = field.default
        # Every layer's value is checked, also one that is overridden: a broken job file is
        # reported whatever flags hide it today.
        for source, layer in layers:
            if field.name in layer:
                value = layer[field.name]
                for item in value if field.kind is list else (value,):
                    _check_value(field, item, source)
                values[field.name] = tuple(value) if field.kind is list else value
                sources[field.name] = source

    if values["nodes"] == 0:
        raise JobError(
            "the number of nodes is not given",
            hint="pass --nodes N, or nodes = N in the job file",
        )
    if not values["image"]:
        gpus = values["gpu_request"] != "none" and values["gpus_per_node"] > 0
        flavour = default_image(values["runtime"], profile.hardware, gpus)
        values["image"] = flavour or DEFAULT_IMAGES[values["runtime"]]
    if not values["ntasks_per_node"]:
        per_gpu = values["launch"] == "srun"
        values["ntasks_per_node"] = max(values["gpus_per_node"], 1) if per_gpu else 1
    if not values["output"]:
        values["output"] = "%x-%A_%a.out" if values["array"] else "%x-%j.out"
    return JobSpec(site=site or profile.name, sources=tuple(sorted(sources.items())), **values)


def _profile_values(job: JobDefaults) -> dict[str, Any]:
    """The profile's [job] keys that differ from JobDefaults' own defaults: a value equal to
    the default is attributed to ddpimg's default, not to the site."""
    unset = JobDefaults()
    out: dict[str, Any] = {}
    for item in fields(JobDefaults):
        value = getattr(job, item.name)
        if value != getattr(unset, item.name) and item.name in FIELD_BY_NAME:
            out[item.name] = value
    return out


def _check_value(field: Field, value: Any, source: str) -> None:
    where = field.option if source == FLAG else f"{source}: {field.name}"
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
    if field.name == "time":
        parse_slurm_time(text, where)
    if field.name == "binds" and "," in text:
        raise JobError(
            f"{where}: {text!r} contains ',', which separates binds for apptainer",
            hint="give each bind on its own (--bind A --bind B)",
        )
    if field.name == "sbatch_options" and not text.startswith("-"):
        raise JobError(
            f"{where}: {text!r} is not an sbatch option",
            hint="write it as on the sbatch command line, e.g. --qos=normal",
        )


def _has_kind(value: object, kind: type) -> bool:
    if kind is int:
        # TOML booleans are Python bools, which are ints; `true` is not a count.
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is list:
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    return isinstance(value, str)


def _kind_name(kind: type) -> str:
    return {int: "an integer", list: "a list of strings"}.get(kind, "a string")


def _example(kind: type) -> str:
    return {int: "4", list: '["a", "b"]'}.get(kind, '"text"')


def flag_values(given: Mapping[str, Any]) -> dict[str, Any]:
    """The flags actually given (argparse leaves the others None), by field name; list flags
    become tuples."""
    out: dict[str, Any] = {}
    for name, value in given.items():
        if name not in FIELD_BY_NAME or value is None:
            continue
        if FIELD_BY_NAME[name].kind is list:
            if value:  # `--` with nothing after it, or no --bind at all
                out[name] = tuple(value)
        else:
            out[name] = value
    return out
