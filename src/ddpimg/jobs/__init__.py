"""Slurm batch scripts that cannot be got wrong: ``ddpimg sbatch``.

A job is resolved (:mod:`~ddpimg.jobs.resolve`, precedence documented there) from flags, a
TOML job file (:mod:`~ddpimg.jobs.job_file`) and the site profile's ``[job]`` defaults, each
value checked against its field (:mod:`~ddpimg.jobs.fields`), into a
:class:`~ddpimg.jobs.spec.JobSpec`; the job is checked as a whole (:mod:`~ddpimg.jobs.checks`:
errors and warnings, each with a hint), then rendered (:mod:`~ddpimg.jobs.render`) into a
commented script with preemption handling: USR2 before the time limit, forwarded to the
training step, which checkpoints and exits 75, then a bounded requeue that resumes.
No torch, no os.environ: the command line (:mod:`ddpimg.cli.sbatch_cmd`) does the I/O.
"""

from __future__ import annotations

from ddpimg.errors import JobError
from ddpimg.jobs.checks import check_job, raise_for_errors
from ddpimg.jobs.command import TrainCommand
from ddpimg.jobs.fields import FIELDS
from ddpimg.jobs.findings import ERROR, WARNING, Finding
from ddpimg.jobs.job_file import JobFile, load_job_file
from ddpimg.jobs.render import render_script
from ddpimg.jobs.resolve import flag_values, resolve_job, select_job_profile
from ddpimg.jobs.spec import JobSpec
from ddpimg.slurm_units import parse_slurm_time

__all__ = [
    "ERROR",
    "FIELDS",
    "WARNING",
    "Finding",
    "JobError",
    "JobFile",
    "JobSpec",
    "TrainCommand",
    "check_job",
    "flag_values",
    "load_job_file",
    "parse_slurm_time",
    "raise_for_errors",
    "render_script",
    "resolve_job",
    "select_job_profile",
]
