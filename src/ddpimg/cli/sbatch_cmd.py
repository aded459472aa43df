"""``ddpimg sbatch``: render a Slurm batch script for a site, an image and a train command;
with ``--submit``, submit it and print the job id.

    ddpimg sbatch --site puhti --nodes 2 --time 12:00:00 --image ddp.sif -- train mnist
    ddpimg sbatch --config job.toml -o job.sh
    ddpimg sbatch --runtime none --nodes 1 --gpus-per-node 2 --submit -- train ...

Flags override the job file, which overrides the site profile's ``[job]`` defaults
(:mod:`ddpimg.jobs.resolve`). Warnings go to stderr; any error stops before anything is written
or submitted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpimg import exitcodes
from ddpimg.cli.sweep_args import MAX_PARALLEL, add_sweep_arguments, sweep_given
from ddpimg.cli.sweep_options import SweepPlan, completed_points, plan_sweep
from ddpimg.fsio import check_new, write_text_atomic
from ddpimg.host import short_hostname
from ddpimg.jobs import (
    ERROR,
    FIELDS,
    Finding,
    JobError,
    JobSpec,
    check_job,
    flag_values,
    load_job_file,
    raise_for_errors,
    render_script,
    resolve_job,
    select_job_profile,
)
from ddpimg.jobs.array import ArrayJob, ArrayPoint, array_spec
from ddpimg.jobs.command import TRAIN, TrainCommand
from ddpimg.jobs.noderange import parse_nodes
from ddpimg.site import SiteProfile
from ddpimg.sweep.results import is_sweep, read_sweep_file

SBATCH_TIMEOUT_S = 60.0


class NodesAction(argparse.Action):
    """``--nodes N`` or ``--nodes MIN-MAX`` (which also sets ``min_nodes``)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        try:
            low, high = parse_nodes(str(values), option_string or "--nodes")
        except JobError as err:  # argparse's way: the usage, the message, exit status 2
            # No argument: the message names the option itself.
            raise argparse.ArgumentError(None, f"{err.message} ({err.hint})") from err
        namespace.nodes = high
        if low < high:
            namespace.min_nodes = low


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--site",
        metavar="NAME|PATH",
        help="site profile (default: the job file's site, DDPIMG_SITE, auto, generic)",
    )
    parser.add_argument(
        "--config", metavar="JOB.toml", help="job file: the same settings as TOML keys"
    )
    add_job_options(parser.add_argument_group("job (default: job file > site profile > built-in)"))
    parser.add_argument(
        "--allow-retired",
        action="store_true",
        help="render for a retired site anyway (re-rendering an old job for its archive)",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "-o",
        "--script-file",
        metavar="FILE",
        help="write the script to FILE instead of stdout (--output is the job's log); an "
        "existing file is replaced only with --force",
    )
    out.add_argument("--force", action="store_true", help="replace the file -o names if it exists")
    out.add_argument(
        "--submit", action="store_true", help="submit with sbatch and print the job id"
    )
    add_sweep_arguments(parser, MAX_PARALLEL)
    # Not "command": the top-level parser keeps the subcommand's name there.
    parser.add_argument(
        "train_command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the training command, after --, e.g. -- train mnist --epochs 5",
    )


def add_job_options(job: argparse._ArgumentGroup, skip: tuple[str, ...] = ()) -> None:
    """The job's settings as options (every field but the command and ``skip``): ``ddpimg
    sbatch``'s, which ``ddpimg submit`` takes too."""
    for field in FIELDS:
        if field.name == "command" or field.name in skip:
            continue
        # argparse formats help with %, and the log patterns contain %j.
        help_text = field.help.replace("%", "%%")
        if field.from_profile and not field.merge:
            help_text += " (default: the site's)"
        elif field.default and field.kind is not list:
            help_text += f" (default: {field.default})"
        options: dict[str, Any] = {"dest": field.name, "default": None, "help": help_text}
        if field.kind is list:
            options["action"] = "append"
        elif field.name == "nodes":
            options["action"] = NodesAction
        elif field.kind is int:
            options["type"] = int
        if field.choices:
            options["choices"] = field.choices
        elif field.metavar:
            options["metavar"] = field.metavar
        job.add_argument(field.option, **options)


@dataclass(frozen=True)
class Prepared:
    """A job resolved and checked, not yet rendered."""

    spec: JobSpec
    profile: SiteProfile
    findings: tuple[Finding, ...]
    array: ArrayJob | None = None
    sweep: SweepPlan | None = None

    def script(self) -> str:
        """The batch script; raises the errors found, if any."""
        raise_for_errors(self.findings)
        return render_script(self.spec, self.profile, self.array)


def prepare(args: argparse.Namespace, env: Mapping[str, str], hostname: str) -> Prepared:
    """Resolve the job from the parsed flags, the job file and the site profile; check it.
    With ``--sweep``, the job is an array of the sweep's points that did not complete in
    this directory (``ddpimg.jobs.array``)."""
    job_file = load_job_file(args.config) if args.config else None
    profile, site = select_job_profile(env, hostname, args.site, job_file)
    given = vars(args) | {"command": _command_words(args.train_command)}
    array = plan = None
    if sweep_given(args):
        command = given["command"] or (job_file.values.get("command", []) if job_file else [])
        plan, array = sweep_array(args, list(command), env)
        given["array"] = array_spec(array.indices, args.max_parallel)
    spec = resolve_job(profile, flag_values(given), job_file, site=site)
    findings = check_job(spec, profile, submit=args.submit, allow_retired=args.allow_retired)
    return Prepared(spec, profile, tuple(findings), array, plan)


def sweep_array(
    args: argparse.Namespace, command: list[str], env: Mapping[str, str]
) -> tuple[SweepPlan, ArrayJob]:
    """The sweep's plan, and its array: the points whose runs did not complete in the
    sweep's directory (as seen from here, the directory the job runs in)."""
    parsed = TrainCommand(tuple(command))
    if parsed.kind != TRAIN:
        raise JobError(
            f"--sweep runs a train command, one point per array task; the command is "
            f"{' '.join(command[:2]) or 'missing'}",
            hint="ddpimg sbatch --sweep lr=0.1,0.01 ... -- train mnist ...",
        )
    if args.array:
        raise JobError(
            f"--array {args.array} with --sweep: the sweep makes the array, one task a point",
            hint="drop --array; --max-parallel K runs at most K points at once",
        )
    if args.max_parallel is not None and args.max_parallel < 1:
        raise JobError(
            f"{MAX_PARALLEL} {args.max_parallel}: must be at least 1", hint=f"{MAX_PARALLEL} 4"
        )
    words = command[1:] if os.path.basename(command[0]) == "train" else command[2:]
    plan = plan_sweep(args, words, env, in_job=True)
    if is_sweep(Path(plan.directory)):
        found = read_sweep_file(Path(plan.directory))
        if not plan.same(found.document):
            raise JobError(
                f"{plan.directory} holds another sweep ({found.name}: "
                f"{' '.join(found.command)} over {', '.join(found.axis_names)})",
                hint="give the train command another --out, or none: each sweep gets a "
                "directory named by its definition",
            )
    done = completed_points(plan, Path(plan.directory))
    todo = [point for point in plan.points if point.name not in done]
    if not todo:
        raise JobError(
            f"every point of sweep {plan.name} completed in {plan.directory}: nothing to run",
            hint=f"ddpimg runs {plan.directory} shows them; remove a point's directory to run "
            "it again",
        )
    points = tuple(
        ArrayPoint(
            point.index,
            point.name,
            tuple(plan.commands.option_words(point)),
            tuple(plan.commands.script_words(point)),
        )
        for point in todo
    )
    document = json.dumps(plan.document, sort_keys=True)
    return plan, ArrayJob(plan.name, plan.directory, document, points)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    env = dict(os.environ)
    path = Path(args.script_file) if args.script_file else None
    if path is not None:
        check_new(path, force=args.force, flag="-o")
    prepared = prepare(args, env, short_hostname())
    for finding in prepared.findings:
        if finding.level != ERROR:
            print(f"ddpimg: {finding.level}: {finding}", file=sys.stderr, flush=True)
    script = prepared.script()
    if prepared.sweep is not None and prepared.array is not None:
        plan, array = prepared.sweep, prepared.array
        skipped = len(plan.points) - len(array.points)
        print(
            f"ddpimg: sweep {plan.name}: {len(array.points)} points as array tasks "
            f"{prepared.spec.array}, each in its own directory under {plan.directory}"
            + (f" ({skipped} completed there earlier: not run again)" if skipped else ""),
            file=sys.stderr,
            flush=True,
        )
    if path is not None:
        try:
            write_text_atomic(path, script)
        except OSError as err:
            raise JobError(
                f"cannot write the script to {path}: {err.strerror or err}",
                hint="give a writable path with -o",
            ) from err
    elif not args.submit:
        sys.stdout.write(script)
    if args.submit:
        print(submit(script, path, env))
    return exitcodes.OK


def _command_words(words: list[str]) -> list[str]:
    # argparse keeps the `--` in front of a REMAINDER positional.
    return words[1:] if words[:1] == ["--"] else words


def submit(script: str, path: Path | None, env: dict[str, str]) -> str:
    """Submit the script (the file if written, else on stdin); return the job id."""
    sbatch = shutil.which("sbatch", path=env.get("PATH"))
    if sbatch is None:
        raise JobError(
            "--submit: sbatch is not on PATH",
            hint="run ddpimg sbatch --submit on a login node of the cluster, or write the "
            "script with -o FILE and submit it there with sbatch FILE",
        )
    argv = [sbatch, "--parsable", *([str(path)] if path is not None else [])]
    try:
        proc = subprocess.run(
            argv,
            input=None if path is not None else script,
            capture_output=True,
            text=True,
            timeout=SBATCH_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise JobError(
            f"--submit: sbatch did not answer within {SBATCH_TIMEOUT_S:g} s",
            hint="the controller may be busy or down; check with squeue, then submit again",
        ) from err
    if proc.returncode != 0:
        raise JobError(
            f"--submit: sbatch exited with status {proc.returncode}: {proc.stderr.strip()}",
            hint="nothing was submitted; fix what sbatch says (partition, account, limits) "
            "with the matching flag",
        )
    # --parsable prints "JOBID" or "JOBID;CLUSTER".
    return proc.stdout.strip().split(";", 1)[0]
