"""Checks run before a script is rendered: each finding is an error or a warning with a hint.

They catch what hand-written batch scripts get wrong: tasks per node that do not match the
GPUs, GPUs spread thinly over many nodes, more GPUs than a node has, a GPU type the site's
Slurm does not know (case and all), a time, node count, GPU count or memory over what the
partition or QOS allows, a launcher (torchrun, DeepSpeed, mpirun) started in every task, a
missing image, an image this project cannot build, a CPU binding that does not fit the
tasks, a USR2 warning that cannot come before the time limit, a retired site.

A partition's or QOS's limit is an error when the site's documentation states it (its
``[sources]`` entry is a URL), a warning when it is marked unverified.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ddpimg.errors import JobError
from ddpimg.jobs.addons import check_addons
from ddpimg.jobs.command import DOCTOR, LAUNCHER, OTHER, TRAIN, TrainCommand
from ddpimg.jobs.data import check_data
from ddpimg.jobs.findings import ERROR, WARNING, Finding
from ddpimg.jobs.flavour import default_image, flavour_mismatch, unbuildable
from ddpimg.jobs.foreign import check_foreign
from ddpimg.jobs.noderange import check_node_range
from ddpimg.jobs.spec import DEFAULT, JobSpec, bind_entries, counted
from ddpimg.site.container import FILE_IMAGE_FORMS, RUNTIMES
from ddpimg.site.model import Limits, SiteProfile
from ddpimg.site.sources import is_documented, source_of
from ddpimg.slurm_units import parse_slurm_memory, parse_slurm_time


def check_job(
    spec: JobSpec, profile: SiteProfile, *, submit: bool = False, allow_retired: bool = False
) -> list[Finding]:
    """Every finding about ``spec`` on ``profile``'s nodes, errors first. ``submit``: the
    script is about to be submitted, so the image file must exist now. ``allow_retired``:
    render for a retired site anyway (an archive's job), with a warning instead of an error."""
    findings = [
        *_check_status(profile, allow_retired),
        *_check_command(spec),
        *_check_node_count(spec, profile),
        *_check_cpus(spec, profile),
        *check_node_range(spec),
        *check_data(spec),
        *check_addons(spec, submit),
        *check_foreign(spec, _site_image(spec, profile)),
        *_check_gpus(spec, profile),
        *_check_gpu_type(spec, profile),
        *_check_layout(spec),
        *_check_time(spec),
        *_check_limits(spec, profile),
        *_check_local_dir(spec, profile),
        *_check_image(spec, submit),
        *_check_flavour(spec, profile),
        *_check_cpu_bind(spec, profile),
        *_check_output(spec),
    ]
    return sorted(findings, key=lambda finding: finding.level != ERROR)


def raise_for_errors(findings: Sequence[Finding]) -> None:
    """Raise one JobError naming every error found (each with its hint)."""
    errors = [finding for finding in findings if finding.level == ERROR]
    if len(errors) == 1:
        raise JobError(errors[0].message, hint=errors[0].hint)
    if errors:
        listed = "\n".join(
            f"  {i}. {error}".replace("\n", "\n     ") for i, error in enumerate(errors, start=1)
        )
        raise JobError(
            f"{len(errors)} problems with this job:\n{listed}",
            hint="fix each as its hint says, then run ddpimg sbatch again",
        )


def _error(message: str, hint: str) -> Finding:
    return Finding(ERROR, message, hint)


def _warning(message: str, hint: str) -> Finding:
    return Finding(WARNING, message, hint)


def _check_command(spec: JobSpec) -> list[Finding]:
    command = TrainCommand(spec.command)
    if not command.words:
        return [
            _error(
                "no training command given",
                hint="put it after --: ddpimg sbatch --nodes 2 -- train mnist --epochs 5 "
                '(or command = ["train", ...] in the job file)',
            )
        ]
    if command.kind == LAUNCHER:
        name = command.launcher_name
        return [
            _error(
                f"the command starts {name}, a launcher of its own: srun already starts "
                f"{counted(spec.ntasks_per_node, 'task')} per node and each would start "
                f"{name}'s own set of processes, with its own rank discovery",
                hint="run `train` (e.g. `train --strategy deepspeed`): ddpimg takes the ranks "
                "from srun; for one launcher per node starting a worker per GPU use "
                "--launch torchrun",
            )
        ]
    if command.kind == OTHER:
        return [
            _warning(
                f"the command '{command.words[0]}' is not ddpimg's train: no --site, --out or "
                "--resume auto is added, and a requeued job starts it from the beginning "
                "unless it resumes by itself",
                hint="`train --script FILE ARGS` runs your script with the ranks, master "
                "address and site variables exported",
            )
        ]
    if command.kind == DOCTOR and spec.launch == "torchrun":
        return [
            _warning(
                "ddpimg doctor with --launch torchrun checks one process per node, not one per GPU",
                hint="use --launch srun to check every rank",
            )
        ]
    return []


def _check_status(profile: SiteProfile, allow_retired: bool) -> list[Finding]:
    """A retired site's job would pend forever: an error, unless rendered for an archive."""
    if not profile.retired_notice:
        return []
    instead = f"--site {profile.successor}" if profile.successor else "the site that replaced it"
    if allow_retired:
        return [
            _warning(
                profile.retired_notice,
                hint=f"rendered for an archive (--allow-retired); to run it, use {instead}",
            )
        ]
    return [
        _error(
            f"{profile.retired_notice}: its nodes take no jobs, a job would pend forever",
            hint=f"use {instead}; --allow-retired renders it anyway (re-rendering an old job "
            "for its archive)",
        )
    ]


def _check_node_count(spec: JobSpec, profile: SiteProfile) -> list[Finding]:
    most = profile.job.max_nodes
    if not most or spec.nodes <= most:
        return []
    return [
        _error(
            f"{spec.origin('nodes')}: site {profile.name} runs jobs on at most "
            f"{counted(most, 'node')} ({profile.description or 'its profile says so'})",
            hint=f"--nodes {most}, or the profile of the cluster the job runs on (--site; "
            "`ddpimg site probe` drafts one for a cluster without a profile)",
        )
    ]


def _check_cpus(spec: JobSpec, profile: SiteProfile) -> list[Finding]:
    """A GPU job on a site that does not say how many CPUs a GPU's rank gets: 1 would leave
    its data loading one core, so the CPUs must be given (or the site probed)."""
    if not spec.gpus_requested or "job.cpus_per_task" in profile.facts:
        return []
    if spec.source("cpus_per_task") != DEFAULT:
        return []
    return [
        _error(
            f"site {profile.name} does not say how many CPUs a rank gets, and no "
            "--cpus-per-task was given: the default 1 leaves each GPU's data loading one core",
            hint="--cpus-per-task C with C = CPUs per node / GPUs per node (`sinfo -N -o "
            "'%N %c %G'` lists both), or draft a profile for the cluster with "
            "`ddpimg site probe`",
        )
    ]


def _check_gpus(spec: JobSpec, profile: SiteProfile) -> list[Finding]:
    usual = profile.job.gpus_per_node
    site_gpus = profile.job.max_gpus_per_node or usual
    if spec.gpu_request == "none":
        return []
    if spec.gpus_per_node == 0:
        return [
            _error(
                f"site {profile.name} does not say how many GPUs a node has and no GPU count "
                "was given",
                hint="pass --gpus-per-node G (gpus_per_node = G in a job file), or "
                "--gpu-request none for a CPU-only job (G then counts tasks per node)",
            )
        ]
    if site_gpus and spec.gpus_per_node > site_gpus:
        return [
            _error(
                f"{spec.origin('gpus_per_node')}: more GPUs per node than the nodes of site "
                f"{profile.name} have ({site_gpus})",
                hint=f"at most --gpus-per-node {site_gpus}; for more GPUs use more nodes: "
                f"--nodes {math.ceil(spec.nodes * spec.gpus_per_node / site_gpus)} "
                f"--gpus-per-node {site_gpus}",
            )
        ]
    whole = usual if spec.gpus_per_node <= usual else site_gpus
    if whole and spec.nodes > 1 and spec.gpus_per_node < whole:
        total = spec.nodes * spec.gpus_per_node
        nodes = math.ceil(total / whole)
        what = (
            "one GPU per node on a multi-node job"
            if spec.gpus_per_node == 1
            else f"{spec.gpus_per_node} of {whole} GPUs per node on a multi-node job"
        )
        return [
            _warning(
                f"{what} ({spec.nodes} nodes x {spec.gpus_per_node}): ranks talk over the "
                "network where GPUs of one node would talk directly, and the nodes' other "
                "GPUs sit idle",
                hint=f"use whole nodes first: --nodes {nodes} --gpus-per-node {whole} "
                f"({counted(nodes * whole, 'GPU')}; with "
                "--global-batch-size the loss trajectory does not change)",
            )
        ]
    return []


def _check_gpu_type(spec: JobSpec, profile: SiteProfile) -> list[Finding]:
    known = profile.job.gpu_types
    if not spec.gpus_requested or not spec.gpu_type or not known or spec.gpu_type in known:
        return []
    same_letters = [name for name in known if name.lower() == spec.gpu_type.lower()]
    hint = (
        f"--gpu-type {same_letters[0]}: Slurm's GPU type names are case-sensitive"
        if same_letters
        else f"one of {', '.join(known)} (--gpu-type; Slurm's names are case-sensitive)"
    )
    return [
        _error(
            f"{spec.origin('gpu_type')}: site {profile.name}'s Slurm knows no GPU type "
            f"'{spec.gpu_type}' (its types: {', '.join(known)})",
            hint=hint,
        )
    ]


def _check_limits(spec: JobSpec, profile: SiteProfile) -> list[Finding]:
    findings: list[Finding] = []
    for section, name, field in (
        ("partitions", spec.partition, "partition"),
        ("qos", spec.qos, "qos"),
    ):
        limits = dict(getattr(profile, section)).get(name)
        if not name or limits is None:
            continue
        source = source_of(profile, f"{section}.{name}")
        where = f"{'partition' if field == 'partition' else 'QOS'} {name} of site {profile.name}"
        cited = f" (source: {source})" if is_documented(source) else f" ({source or 'unverified'})"
        level = ERROR if is_documented(source) else WARNING
        for message, hint in _over_limits(spec, limits, where):
            findings.append(Finding(level, message, hint + cited))
    return findings


def _over_limits(spec: JobSpec, limits: Limits, where: str) -> list[tuple[str, str]]:
    """(message, hint) for each limit of ``where`` that ``spec`` exceeds."""
    found: list[tuple[str, str]] = []
    limit_s = parse_slurm_time(limits.max_time) if limits.max_time else None
    # No --time: the partition's own default applies, which is within its limit. An
    # UNLIMITED --time (None seconds) is over any limit.
    asked_s = spec.time_seconds
    if spec.time and limit_s is not None and (asked_s is None or asked_s > limit_s):
        found.append(
            (
                f"{spec.origin('time')} is longer than {where} allows ({limits.max_time})",
                f"--time {limits.max_time} at most, or another partition or QOS",
            )
        )
    if limits.max_nodes and spec.nodes > limits.max_nodes:
        found.append(
            (
                f"{spec.origin('nodes')}: {where} allows at most {limits.max_nodes} nodes",
                f"--nodes {limits.max_nodes} at most, or another partition or QOS",
            )
        )
    if limits.min_nodes and spec.nodes < limits.min_nodes:
        found.append(
            (
                f"{spec.origin('nodes')}: {where} takes jobs of {limits.min_nodes} nodes or more",
                "more nodes, or another partition or QOS",
            )
        )
    gpus = spec.nodes * spec.gpus_per_node if spec.gpus_requested else 0
    if limits.max_gpus and gpus > limits.max_gpus:
        found.append(
            (
                f"{spec.nodes} nodes x {spec.gpus_per_node} GPUs = {gpus}: {where} allows at "
                f"most {counted(limits.max_gpus, 'GPU')} a job",
                "fewer GPUs, or another partition or QOS",
            )
        )
    if (
        limits.min_gpus_per_node
        and spec.gpus_requested
        and (spec.gpus_per_node < limits.min_gpus_per_node)
    ):
        found.append(
            (
                f"{spec.origin('gpus_per_node')}: {where} takes "
                f"{limits.min_gpus_per_node} GPUs per node or more",
                f"--gpus-per-node {limits.min_gpus_per_node}, or another partition",
            )
        )
    if (
        limits.max_mem
        and spec.mem
        and parse_slurm_memory(spec.mem) > parse_slurm_memory(limits.max_mem)
    ):
        found.append(
            (
                f"{spec.origin('mem')} per node is more than {where} allows ({limits.max_mem})",
                f"--mem {limits.max_mem} at most",
            )
        )
    return found


def _check_layout(spec: JobSpec) -> list[Finding]:
    command = TrainCommand(spec.command)
    # Only train's own --nproc-per-node; a launcher's is reported as a launcher.
    nproc = command.option("--nproc-per-node") if command.kind == TRAIN else None
    gpus = spec.gpus_per_node
    if spec.launch == "torchrun":
        if spec.ntasks_per_node != 1:
            return [
                _error(
                    f"{spec.origin('ntasks_per_node')}: with --launch torchrun each node runs "
                    "one launcher task, which starts the workers",
                    hint="--ntasks-per-node 1 (or leave it out), or --launch srun for one "
                    "task per GPU",
                )
            ]
        if nproc is not None and nproc != str(spec.ranks_per_node):
            return [
                _error(
                    f"the command's --nproc-per-node {nproc} does not match "
                    f"{spec.origin('gpus_per_node')}",
                    hint=f"leave --nproc-per-node out: ddpimg adds --nproc-per-node "
                    f"{spec.ranks_per_node}",
                )
            ]
        return []
    if gpus and spec.ntasks_per_node != gpus:
        return [
            _error(
                f"{spec.origin('ntasks_per_node')}: tasks per node != GPUs per node "
                f"({gpus}); with --launch srun every task is one rank on one GPU",
                hint=f"--ntasks-per-node {gpus} (or leave it out); for one task per node "
                f"starting {counted(gpus, 'worker')} use --launch torchrun",
            )
        ]
    if nproc is not None and spec.ntasks_per_node > 1:
        return [
            _error(
                f"the command has --nproc-per-node {nproc} while srun starts "
                f"{spec.ntasks_per_node} tasks per node: each task would start its own workers",
                hint="use --launch torchrun (one task per node; ddpimg adds --nproc-per-node), "
                "or drop --nproc-per-node",
            )
        ]
    return []


def _check_time(spec: JobSpec) -> list[Finding]:
    limit = spec.time_seconds
    if not spec.time:
        return [
            _warning(
                "no time limit given: the partition's default applies, and USR2 comes "
                f"{spec.signal_seconds} s before whatever it is",
                hint="pass --time (e.g. --time 12:00:00) so you know when the job stops",
            )
        ]
    if limit is not None and spec.signal_seconds >= limit:
        return [
            _error(
                f"{spec.origin('signal_seconds')} is not less than the time limit "
                f"{spec.origin('time')} ({limit} s): the checkpoint warning would come before "
                "the job starts",
                hint=f"a longer --time, or --signal-seconds below {limit} (long enough to "
                "write a checkpoint)",
            )
        ]
    return []


def _check_image(spec: JobSpec, submit: bool) -> list[Finding]:
    if spec.runtime == "none":
        if spec.source("image") != DEFAULT:
            return [
                _warning(
                    f"{spec.origin('image')} is not used with --runtime none",
                    hint="--runtime apptainer (or the site's runtime) to run in the image",
                )
            ]
        return []
    is_file = RUNTIMES[spec.runtime].image_form in FILE_IMAGE_FORMS
    if submit and is_file and not Path(spec.image).is_file():
        return [
            _error(
                f"image file {spec.image} does not exist (from {Path.cwd()})",
                hint="build it first (apptainer build ddp.sif ..., enroot import "
                "dockerd://ddpimg:gpu; see docs/containers.md) or give its path with --image",
            )
        ]
    return []


def _site_image(spec: JobSpec, profile: SiteProfile) -> bool:
    """Whether the job's image is the site's own container (``container.image_from``)."""
    return profile.container.image_from == "site" and spec.source("image").startswith("site ")


def _check_flavour(spec: JobSpec, profile: SiteProfile) -> list[Finding]:
    if spec.runtime == "none" or not spec.gpus_requested or spec.ddpimg_from:
        return []  # no image, or one that is not ddpimg's: no flavour of ddpimg's applies
    missing = unbuildable(profile.hardware)
    if missing and spec.source("image") == DEFAULT:
        return [
            _error(
                f"site {profile.name}'s {profile.hardware.gpus or 'GPUs'} need the {missing} "
                f"image ({spec.image}), which this project cannot build yet (no lock: its "
                "torch wheels come from an index the build machines cannot reach)",
                hint="build that flavour of containers/Dockerfile where its wheels are "
                "reachable and pass --image PATH; or run the CPU image: --gpu-request none "
                f"--image {default_image(spec.runtime, profile.hardware, gpus=False)}",
            )
        ]
    mismatch = flavour_mismatch(spec.image, profile.hardware)
    return [_warning(*mismatch)] if mismatch else []


def _check_local_dir(spec: JobSpec, profile: SiteProfile) -> list[Finding]:
    if not spec.stage_data or profile.job.local_dir_kind != "ram":
        return []
    return [
        _warning(
            f"--stage-data copies into {spec.local_dir}, which is memory on site "
            f"{profile.name}: the copy counts against the job's memory",
            hint="stage only what fits beside the training (--mem), or read a squashfs image "
            "(--data-image) instead",
        )
    ]


def _check_cpu_bind(spec: JobSpec, profile: SiteProfile) -> list[Finding]:
    entries = bind_entries(spec.cpu_bind)
    if not spec.cpu_bind or spec.cpu_bind_applies or entries is None:
        return []
    return [
        _warning(
            f"{spec.origin('cpu_bind')} binds {counted(entries, 'task')} per node one by one, "
            f"this job runs {spec.ntasks_per_node}: no --cpu-bind is rendered",
            hint=f"--ntasks-per-node {entries} (one task per GPU, --launch srun) to have it",
        )
    ]


def _check_output(spec: JobSpec) -> list[Finding]:
    if any(token in spec.output for token in ("%j", "%A")):
        return []
    return [
        _warning(
            f"{spec.origin('output')} has no job id (%j, or %A for arrays): other jobs write "
            "into the same log",
            hint="keep %j in the pattern, e.g. --output logs/%x-%j.out",
        )
    ]
