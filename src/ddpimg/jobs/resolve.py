"""Resolving a job: where each value comes from.

Precedence, highest first (each cell is tested in ``tests/jobs/test_resolve.py``):

1. a command-line flag (``--nodes 2``);
2. the job file (``--config job.toml`` holding ``nodes = 2``);
3. the site profile: its ``[job]`` section (GPUs per node, GPU type and request syntax, CPUs
   per task, partition, QOS, constraint, CPU binding, binds) and its ``[container]`` runtime
   and image (the image only for the site's own runtime);
4. the built-in default in :data:`~ddpimg.jobs.fields.FIELDS`.

Derived when not given: the image (the site's flavour in the runtime's form,
:mod:`~ddpimg.jobs.flavour`), ``--mem`` (the site's ``job.mem_per_gpu`` times the GPUs per
node), the constraint of the site's largest GPU nodes when a job asks for more GPUs than
the usual node has (``job.max_gpus_constraint``), tasks per node and the log's name.

List fields (``binds``, ``sbatch_options``) are the exception: every layer adds to them, in
the order profile, job file, flags, so ``--bind /data`` keeps the site's file systems.

The profile itself is chosen by ``--site``, else the job file's ``site``, else the usual
``DDPIMG_SITE`` > auto-detection > ``generic`` (:func:`ddpimg.site.select_profile`).

Every value is checked against its field (:func:`~ddpimg.jobs.fields.check_value`), the
error naming the layer it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from ddpimg.errors import JobError
from ddpimg.jobs.fields import FIELD_BY_NAME, FIELDS, Field, check_value
from ddpimg.jobs.flavour import default_image
from ddpimg.jobs.job_file import JobFile
from ddpimg.jobs.spec import FLAG, JobSpec
from ddpimg.site.model import JobDefaults, SiteProfile
from ddpimg.site.select import select_profile
from ddpimg.slurm_units import format_slurm_memory, parse_slurm_memory


def select_job_profile(
    env: Mapping[str, str], hostname: str, site_flag: str | None, job_file: JobFile | None
) -> tuple[SiteProfile, str | None]:
    """The profile for a job, and the site as the user named it (None: not named, so the
    profile's name is passed on). ``--site`` > the job file's ``site`` > ``DDPIMG_SITE`` >
    auto-detection > ``generic``."""
    named = site_flag or (job_file.site if job_file is not None else None)
    return select_profile(env, hostname, named).profile, named


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


Layers = list[tuple[str, Mapping[str, Any]]]


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
    layers: Layers = [(_site_layer(profile), _site_values(profile))]
    if job_file is not None:
        layers.append((job_file.path, {k: v for k, v in job_file.values.items() if k != "site"}))
    layers.append((FLAG, flags))
    values, sources = _merge(layers)
    _check_nodes(values, sources)
    _derive(values, sources, profile)
    return JobSpec(site=site or profile.name, sources=tuple(sorted(sources.items())), **values)


def _site_layer(profile: SiteProfile) -> str:
    return f"site {profile.name}"


def _site_values(profile: SiteProfile) -> dict[str, Any]:
    """The site's layer: its [job] keys, its fabric's binds, its container runtime and image."""
    values = _profile_values(profile.job)
    if profile.fabric.binds:  # the fabric's host paths come with the site's file systems
        values["binds"] = (*values.get("binds", ()), *profile.fabric.binds)
    if profile.container.runtime:
        values["runtime"] = profile.container.runtime
    if profile.container.image:
        values["image"] = profile.container.image
    return values


def _merge(layers: Layers) -> tuple[dict[str, Any], dict[str, str]]:
    """Every field's value from the highest layer that has it (list fields: every layer's
    items, once each, in layer order), and the layer each value came from."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for field in FIELDS:
        if field.merge:
            items: list[str] = []
            for source, layer in layers:
                for item in layer.get(field.name, ()):
                    check_value(field, item, _where(field, source))
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
                    check_value(field, item, _where(field, source))
                values[field.name] = tuple(value) if field.kind is list else value
                sources[field.name] = source
    return values, sources


def _check_nodes(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    if values["nodes"] == 0:
        raise JobError(
            "the number of nodes is not given",
            hint="pass --nodes N, or nodes = N in the job file",
        )
    if values["min_nodes"] > values["nodes"]:
        where = _where(FIELD_BY_NAME["min_nodes"], sources["min_nodes"])
        raise JobError(
            f"{where}: {values['min_nodes']} is more than the {values['nodes']} nodes asked for",
            hint=f"a range goes MIN-MAX: --nodes {values['nodes']}-{values['min_nodes']}, or "
            f"--min-nodes {values['nodes']} at most",
        )


def _derive(values: dict[str, Any], sources: dict[str, str], profile: SiteProfile) -> None:
    """Fill in what was not given and follows from what was (the module's docstring)."""
    site_layer = _site_layer(profile)
    job = profile.job
    gpus = values["gpu_request"] != "none" and values["gpus_per_node"] > 0
    # The image: the site's is a reference for its own runtime, not for the one asked for.
    if sources.get("image") == site_layer and values["runtime"] != profile.container.runtime:
        values["image"] = ""
        del sources["image"]
    if not values["image"]:
        values["image"] = default_image(values["runtime"], profile.hardware, gpus)
    # Memory: the site's per-GPU share times the GPUs asked for.
    if not values["mem"] and job.mem_per_gpu and gpus:
        per_gpu = parse_slurm_memory(job.mem_per_gpu, f"{site_layer}: job.mem_per_gpu")
        values["mem"] = format_slurm_memory(per_gpu * values["gpus_per_node"])
        sources["mem"] = site_layer
    # More GPUs than the usual node has: the constraint of the site's largest nodes, unless
    # the job file or a flag chose a constraint.
    largest = job.max_gpus_constraint and values["gpus_per_node"] > job.gpus_per_node
    if largest and gpus and sources.get("constraint", site_layer) == site_layer:
        values["constraint"] = job.max_gpus_constraint
        sources["constraint"] = site_layer
    if not values["ntasks_per_node"]:  # srun starts one task per GPU, the others one a node
        per_gpu = values["launch"] == "srun"
        values["ntasks_per_node"] = max(values["gpus_per_node"], 1) if per_gpu else 1
    if values["ddpimg_from"] and values["ddpimg_from"] not in values["binds"]:
        values["binds"] = (*values["binds"], values["ddpimg_from"])  # found at its own path
    if not values["output"]:
        values["output"] = "%x-%A_%a.out" if values["array"] else "%x-%j.out"


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


def _where(field: Field, source: str) -> str:
    """How an error names a value's origin: ``--nodes``, ``job.toml: nodes``."""
    return field.option if source == FLAG else f"{source}: {field.name}"
