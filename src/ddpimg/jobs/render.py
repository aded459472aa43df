"""Render a checked :class:`~ddpimg.jobs.spec.JobSpec` into a Slurm batch script.

The output is deterministic (same spec, same bytes: the golden files in ``tests/jobs/golden``
and ``docs/sbatch-examples.md`` depend on it) and commented: each comment in the script says
why its line is there, so a reader on the cluster does not need this file.

Shell quoting follows one rule: job-level values (``SLURM_JOB_ID``, ``SLURM_RESTART_COUNT``)
are expanded by the batch shell; per-task values (``SLURM_PROCID``, ``SLURM_NODEID``,
``SLURM_LOCALID``) exist only inside the step, so they sit in single quotes that reach each
task's own shell. Every value a user, a job file or a site profile gives is quoted for the
shell it lands in with :func:`shlex.quote`, or refused where it must be one word of an
``#SBATCH`` line (:mod:`ddpimg.jobs.fields`); a path expanded on the node (``--local-dir``)
may hold only plain variables (:mod:`ddpimg.shellpath`). The scripts are shellcheck-clean
(``tests/jobs/test_golden.py``), and ``tests/jobs/test_quoting.py`` renders every field
with hostile values and runs the scripts with stub commands.
"""

from __future__ import annotations

import shlex
import textwrap

from ddpimg import exitcodes
from ddpimg.jobs.addons import addon_cleanup_lines, addon_lines
from ddpimg.jobs.array import OUT_WORD, POINT_WORD, ArrayJob, point_lines
from ddpimg.jobs.command import RUN_DIR, TRAIN, TrainCommand, shell_words
from ddpimg.jobs.data import cleanup_lines, data_word, staging_lines
from ddpimg.jobs.directives import SINGLE_QUOTED
from ddpimg.jobs.foreign import entry_point, keep_words, srun_word, wrapper_lines
from ddpimg.jobs.runtimes import invocation
from ddpimg.jobs.spec import JobSpec, counted
from ddpimg.jobs.template import JOB_BODY, fill_template
from ddpimg.site.model import Limits, SiteProfile

INDENT = "    "
COMMENT_WIDTH = 90
CONTINUATION = " \\\n" + INDENT
# Runs in each task before the command: one log line per task says where it runs, then
# `exec` so that signals from srun reach the command itself.
TASK_PRELUDE = (
    'echo "ddpimg: task ${SLURM_PROCID} (node ${SLURM_NODEID}, local ${SLURM_LOCALID}) '
    'on $(hostname -s)" >&2; exec "$@"'
)


def render_script(spec: JobSpec, profile: SiteProfile, array: ArrayJob | None = None) -> str:
    """The batch script for ``spec`` on ``profile``'s site (checks are the caller's job:
    :func:`ddpimg.jobs.checks.check_job`); ``array``: a sweep, one point per array task
    (``spec.array`` holds its indices)."""
    lines = [
        *_header(spec, profile, array),
        *_directives(spec, profile),
        "",
        *_body(spec, profile, array),
    ]
    return "\n".join(lines) + "\n"


def _header(spec: JobSpec, profile: SiteProfile, array: ArrayJob | None) -> list[str]:
    ranks = counted(spec.nodes * spec.ranks_per_node, "rank")
    nodes = counted(spec.nodes, "node")
    if spec.node_range:
        ranks = f"{spec.min_nodes * spec.ranks_per_node}-{ranks}"
        nodes = f"{spec.min_nodes}-{nodes}"
    if spec.gpus_requested:
        size = f"{nodes} x {counted(spec.gpus_per_node, 'GPU')} = {ranks}"
    else:
        size = f"{nodes} x {counted(spec.ranks_per_node, 'rank')} on CPUs = {ranks}"
    if spec.launch == "torchrun":
        how = (
            "srun starts one task per node, whose `train --nproc-per-node "
            f"{spec.ranks_per_node}` starts the workers"
        )
    else:
        how = "srun starts one task per rank"
    about = f" ({profile.description})" if profile.description else ""
    sweep = (
        f" A sweep of {counted(len(array.points), 'point')}, each an array task with this layout."
        if array is not None
        else ""
    )
    text = (
        f"Rendered by `ddpimg sbatch` for site {profile.name}{about}. {size}: {how}.{sweep} "
        "Render it again rather than editing it: ddpimg checks the layout it writes."
    )
    return ["#!/bin/bash", *_comment(text)]


def _comment(text: str) -> list[str]:
    """``text`` as ``#`` lines of at most COMMENT_WIDTH characters."""
    lines = textwrap.wrap(text, COMMENT_WIDTH - 2, break_on_hyphens=False, break_long_words=False)
    return [f"# {line}" for line in lines]


def _gpu_directive(spec: JobSpec, profile: SiteProfile) -> list[str]:
    if not spec.gpus_requested:
        return ["# No GPU request (--gpu-request none): the ranks run on CPUs."]
    typed = f"{spec.gpu_type}:" if spec.gpu_type else ""
    why = f"# GPUs requested the way site {profile.name} wants, and only that way."
    if spec.gpu_request == "gres":
        return [why, f"#SBATCH --gres=gpu:{typed}{spec.gpus_per_node}"]
    return [why, f"#SBATCH --gpus-per-node={typed}{spec.gpus_per_node}"]


def _directives(spec: JobSpec, profile: SiteProfile) -> list[str]:
    if spec.launch == "torchrun":
        tasks_why = "# One launcher task per node; it starts a worker per GPU."
        cpus_why = f"# CPUs for all {spec.ranks_per_node} workers of the node's one task."
    else:
        tasks_why = (
            "# One task per GPU: each task is one rank, bound by ddpimg to the GPU of its "
            "local rank."
            if spec.gpus_requested
            else "# One task per rank."
        )
        cpus_why = "# CPUs per rank, for its data-loading workers."
    nodes_why = (
        _comment(
            f"A node range: Slurm starts the job, and a requeued one, on {spec.min_nodes} to "
            f"{spec.nodes} nodes; the step takes the nodes it got, with the same global batch, "
            "so a job that lost a node goes on without it."
        )
        if spec.node_range
        else []
    )
    lines = [
        f"#SBATCH --job-name={spec.job_name}",
        *nodes_why,
        f"#SBATCH --nodes={spec.nodes_request}",
        tasks_why,
        f"#SBATCH --ntasks-per-node={spec.ntasks_per_node}",
        *_gpu_directive(spec, profile),
        cpus_why,
        f"#SBATCH --cpus-per-task={spec.cpus_per_slurm_task}",
    ]
    lines += _optional("time", spec.time)
    lines += _noted("partition", spec.partition, profile.partitions)
    lines += _noted("qos", spec.qos, profile.qos)
    lines += _optional("account", spec.account)
    lines += _optional("constraint", spec.constraint)
    lines += _optional("mem", spec.mem)
    lines += _optional("array", spec.array)
    lines += [
        "# The job id (%j, arrays %A_%a) stays the same when the job is requeued; append mode",
        "# keeps the log of every restart in one file.",
        f"#SBATCH --output={spec.output}",
        "#SBATCH --open-mode=append",
        *_comment(
            f"USR2 reaches this batch shell (B:) {spec.signal_seconds} s before the time "
            "limit; the trap below passes it to the training step, which checkpoints and "
            f"exits {exitcodes.PREEMPTED}; the script then requeues the job, which resumes "
            f"from the checkpoint. It does the same when a rank was lost (exit "
            f"{exitcodes.RANK_LOST})."
        ),
        "#SBATCH --requeue",
        f"#SBATCH --signal=B:USR2@{spec.signal_seconds}",
    ]
    if spec.sbatch_options:
        lines.append("# Extra options given with --sbatch-option / sbatch_options.")
        lines += [f"#SBATCH {option}" for option in spec.sbatch_options]
    return lines


def _optional(name: str, value: str) -> list[str]:
    return [f"#SBATCH --{name}={value}"] if value else []


def _noted(name: str, value: str, limits: tuple[tuple[str, Limits], ...]) -> list[str]:
    """A partition's or QOS's line, after the site's note about it (the access it needs)."""
    note = dict(limits)[value].note if value in dict(limits) else ""
    return [*(_comment(f"{value}: {note}") if note else []), *_optional(name, value)]


def _module_lines(profile: SiteProfile) -> list[str]:
    """The modules the site's runtime needs in the batch shell (its container bindings)."""
    job = profile.job
    if not job.modules:
        return []
    return [
        *_comment(
            f"Site {profile.name}'s modules for its container runtime (job.modules): they set "
            "the binds its containers need."
        ),
        *(f"module use {shlex.quote(path)}" for path in job.module_use),
        f"module load {' '.join(shlex.quote(name) for name in job.modules)}",
        "",
    ]


def _unset_lines(profile: SiteProfile) -> list[str]:
    """The variables the site's srun must not inherit from the batch shell."""
    names = profile.job.unset_env
    if not names:
        return []
    return [
        *_comment(
            f"Site {profile.name}'s profile (job.unset_env): the training step's srun must not "
            "inherit these from the batch shell; its [sources] say why."
        ),
        f"unset {' '.join(names)}",
        "",
    ]


def _body(spec: JobSpec, profile: SiteProfile, array: ArrayJob | None) -> list[str]:
    """The script after its directives: templates/job-body.sh with this job's values and
    parts filled in."""
    return fill_template(
        JOB_BODY,
        values={
            "MAX_RESTARTS": str(spec.max_restarts),
            "PREEMPTED": str(exitcodes.PREEMPTED),
            "RANK_LOST": str(exitcodes.RANK_LOST),
        },
        parts={
            "STEP": [
                *_unset_lines(profile),
                *_module_lines(profile),
                *wrapper_lines(spec),
                *staging_lines(spec),
                *addon_lines(spec),
                *(point_lines(array) if array is not None else []),
                *_step(spec, profile, array),
            ],
            "CLEANUP": [*cleanup_lines(spec), *addon_cleanup_lines(spec)],
            "LOST_FROM_MANIFEST": _lost_from_manifest(spec, array),
        },
    )


def _lost_from_manifest(spec: JobSpec, array: ArrayJob | None) -> list[str]:
    """srun reports the highest status of its tasks, 137 when the lost rank was killed
    (SIGKILL: by its sentinel, the out-of-memory killer); a bundled trainer's manifest.json
    then records ``rank_lost``, which tells that 137 from a crash. A script's run directory
    is not known here."""
    command = TrainCommand(spec.command)
    if command.kind != TRAIN or command.script:
        return []
    out = command.option("--out")
    run = RUN_DIR if out is None else shlex.quote(out)
    if array is not None:
        run = OUT_WORD
    return [
        f'if [ "$status" -eq 137 ] && grep -qs \'"rank_lost"\' {run}/manifest.json; then lost=1; fi'
    ]


def _step(spec: JobSpec, profile: SiteProfile, array: ArrayJob | None) -> list[str]:
    """The runtime's preamble, comments, then the backgrounded srun command, one continuation
    line per part."""
    runtime = invocation(spec, profile)
    srun = [
        srun_word(spec),
        f"--nodes={spec.step_nodes}",
        f"--ntasks-per-node={spec.ntasks_per_node}",
        f"--cpus-per-task={spec.cpus_per_slurm_task}",
    ]
    binding = ["--cpu-bind=" + shlex.quote(spec.cpu_bind)] if spec.cpu_bind_applies else []
    prelude = ["bash", "-c", shlex.quote(TASK_PRELUDE), "ddpimg-task"]
    command = shell_words(
        TrainCommand(spec.command),
        spec.site,
        spec.launch,
        spec.ranks_per_node,
        data_word(spec),
        extra=keep_words(spec),
        point=POINT_WORD if array is not None else None,
    )
    if spec.ddpimg_from and command:
        command[0] = shlex.quote(entry_point(spec.command[0], spec.ddpimg_from))
    parts = [srun]
    if binding or runtime.srun_options:
        parts.append([*binding, *runtime.srun_options])
    parts += [prelude, *(list(line) for line in runtime.prefix), [*command, "&"]]
    comments = [
        "# The training step, in the background so that the traps above can run. srun is",
        "# given --cpus-per-task again: since Slurm 22.05 it does not take it from the job.",
        "# The single quotes keep the per-task variables for each task's own shell.",
    ]
    if binding:
        comments.append(f"# --cpu-bind: site {profile.name}'s binding of each task's cores.")
    return [
        *runtime.preamble,
        *comments,
        *runtime.comments,
        SINGLE_QUOTED,
        CONTINUATION.join(" ".join(part) for part in parts),
    ]
