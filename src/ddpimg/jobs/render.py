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
from ddpimg.jobs.command import RUN_DIR, TRAIN, TrainCommand, shell_words
from ddpimg.jobs.data import cleanup_lines, data_word, staging_lines
from ddpimg.jobs.directives import SINGLE_QUOTED, TRAP_HANDLER
from ddpimg.jobs.foreign import entry_point, keep_words, srun_word, wrapper_lines
from ddpimg.jobs.runtimes import invocation
from ddpimg.jobs.spec import JobSpec, counted
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


def render_script(spec: JobSpec, profile: SiteProfile) -> str:
    """The batch script for ``spec`` on ``profile``'s site (checks are the caller's job:
    :func:`ddpimg.jobs.checks.check_job`)."""
    lines = [*_header(spec, profile), *_directives(spec, profile), "", *_body(spec, profile)]
    return "\n".join(lines) + "\n"


def _header(spec: JobSpec, profile: SiteProfile) -> list[str]:
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
    text = (
        f"Rendered by `ddpimg sbatch` for site {profile.name}{about}. {size}: {how}. "
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


def _body(spec: JobSpec, profile: SiteProfile) -> list[str]:
    return [
        "# No `set -e`: `wait` returns non-zero when a signal arrives, and the script must go",
        "# on to pass the signal to the step and decide about the requeue.",
        "set -uo pipefail",
        "",
        f"MAX_RESTARTS={spec.max_restarts}",
        "# train's exit statuses (ddpimg.exitcodes): checkpointed on USR2 or TERM; a rank lost",
        "# (stopped, dead, failed) and the others gave up on it.",
        f"PREEMPTED={exitcodes.PREEMPTED}",
        f"RANK_LOST={exitcodes.RANK_LOST}",
        "",
        'echo "ddpimg: job ${SLURM_JOB_ID}, restart ${SLURM_RESTART_COUNT:-0}, '
        'nodes ${SLURM_JOB_NODELIST}" >&2',
        "",
        'step_pid=""',
        "interrupted=0",
        "cancelled=0",
        TRAP_HANDLER,
        "forward_usr2() {",
        "    interrupted=1",
        '    echo "ddpimg: USR2, time limit near: the training step checkpoints and stops" >&2',
        "    # srun passes the signal on to every task of its step.",
        '    if [ -n "$step_pid" ]; then kill -USR2 "$step_pid"; fi',
        "}",
        TRAP_HANDLER,
        "note_term() {",
        "    interrupted=1",
        "    cancelled=1",
        "    # Slurm signals the step itself when it cancels or preempts the job (and requeues",
        "    # it itself if it preempted it): only keep waiting, so the checkpoint gets written.",
        '    echo "ddpimg: TERM, job cancelled or preempted: waiting for the step" >&2',
        "}",
        "trap forward_usr2 USR2",
        "trap note_term TERM",
        "",
        *_unset_lines(profile),
        *_module_lines(profile),
        *wrapper_lines(spec),
        *staging_lines(spec),
        *_step(spec, profile),
        "step_pid=$!",
        "",
        "# A trapped signal ends `wait` early (status 128+signal) while the step still runs.",
        "while :; do",
        "    interrupted=0",
        '    wait "$step_pid"',
        "    status=$?",
        '    if [ "$interrupted" -eq 0 ] || [ "$status" -le 128 ]; then',
        "        break",
        "    fi",
        "done",
        "",
        *cleanup_lines(spec),
        *_lost_lines(spec),
        "# Preempted (checkpoint written) or a rank lost: requeue, so the job resumes from its",
        "# last checkpoint, at most MAX_RESTARTS times. An array task is requeued by its own",
        "# id, <array job id>_<task id>.",
        'if { [ "$status" -eq "$PREEMPTED" ] || [ "$lost" -eq 1 ]; } '
        '&& [ "$cancelled" -eq 0 ]; then',
        "    restarts=${SLURM_RESTART_COUNT:-0}",
        '    if [ -n "${SLURM_ARRAY_JOB_ID:-}" ]; then',
        '        job="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"',
        "    else",
        '        job="${SLURM_JOB_ID}"',
        "    fi",
        '    if [ "$restarts" -ge "$MAX_RESTARTS" ]; then',
        '        echo "ddpimg: job $job was restarted $restarts times (at most $MAX_RESTARTS):'
        ' not requeueing; resubmit it to go on from the checkpoint" >&2',
        "    else",
        '        echo "ddpimg: requeueing job $job (restart $((restarts + 1)) of'
        ' $MAX_RESTARTS)" >&2',
        '        scontrol requeue "$job" && exit 0',
        '        echo "ddpimg: scontrol requeue $job failed; resubmit it to go on from the'
        ' checkpoint" >&2',
        "    fi",
        "fi",
        'echo "ddpimg: the training step ended with status $status" >&2',
        'exit "$status"',
    ]


def _lost_lines(spec: JobSpec) -> list[str]:
    """Whether a rank was lost: the survivors exit RANK_LOST, but srun reports the highest
    status of its tasks, 137 when the lost rank was killed (SIGKILL: by its sentinel, the
    out-of-memory killer); the run's manifest.json then records ``rank_lost``."""
    command = TrainCommand(spec.command)
    lines = [
        "# A rank lost: the ranks that gave up on it exit RANK_LOST; srun reports 137 instead",
        "# when the lost rank was killed (by its sentinel, the out-of-memory killer), and the",
        "# run's manifest.json says so.",
        "lost=0",
        'if [ "$status" -eq "$RANK_LOST" ]; then lost=1; fi',
    ]
    if command.kind == TRAIN and not command.script:
        out = command.option("--out")
        run = RUN_DIR if out is None else shlex.quote(out)
        lines.append(
            f'if [ "$status" -eq 137 ] && grep -qs \'"rank_lost"\' {run}/manifest.json; then '
            "lost=1; fi"
        )
    return [
        *lines,
        'if [ "$lost" -eq 1 ]; then',
        '    echo "ddpimg: a rank was lost (status $status, the error above names it): the job'
        ' goes on from its last checkpoint on the nodes Slurm gives it" >&2',
        "fi",
        "",
    ]


def _step(spec: JobSpec, profile: SiteProfile) -> list[str]:
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
