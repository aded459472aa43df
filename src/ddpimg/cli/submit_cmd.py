"""``ddpimg submit --host LOGIN [--site S|auto] [job options] -- train ...``: from a laptop to
a cluster over your own ssh, in one command.

    ddpimg submit --host puhti -- train mnist --epochs 5         # prints the run's name
    ddpimg submit --host me@login.cluster.org --site roihu --nodes 2 --follow -- \\
        train --script train.py --lr 0.1
    ddpimg follow mnist-4242; ddpimg fetch mnist-4242; ddpimg cancel mnist-4242
    ddpimg submit --host puhti --sweep lr=0.1,0.01 --sweep seed=1,2 --max-parallel 2 -- \
        train mnist --epochs 5                       # one array job: mnist-sweep-4243

Over one ssh connection (your ~/.ssh/config, agent and ProxyJump) it checks the login node
(Slurm, ddpimg, the site), stages the working tree by content (what git would track, or
--include; a second submit of the same tree copies nothing), renders the job there with
``ddpimg sbatch`` and the site's profile, submits it, and records the run in
$XDG_STATE_HOME/ddpimg/remote-runs.json (ddpimg runs lists it). The job options are
``ddpimg sbatch``'s.
"""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from ddpimg import exitcodes
from ddpimg.cli import remote_common, sbatch_cmd
from ddpimg.cli.sweep_args import MAX_PARALLEL, add_sweep_arguments, sweep_given
from ddpimg.cli.sweep_options import plan_sweep
from ddpimg.errors import DdpimgError, printable
from ddpimg.jobs import FIELDS
from ddpimg.jobs.command import TRAIN, TrainCommand
from ddpimg.remote import programs, state
from ddpimg.remote.follow import DEFAULT_GIVE_UP_S, DEFAULT_INTERVAL_S
from ddpimg.remote.login import AUTO, check_login
from ddpimg.remote.submit import Request, check_command, log_options, submit, with_addons
from ddpimg.remote.tree import DEFAULT_MAX_FILES, DEFAULT_MAX_MB, Limits, collect_tree
from ddpimg.runs.names import DEFAULT_ROOT, runs_root

# Options of ddpimg sbatch that do not fit a run followed from here: an array is many runs.
NOT_HERE = ("array",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--host",
        required=True,
        metavar="LOGIN",
        help="the login node as you give it to ssh: a name, user@name, or a Host of ~/.ssh/config",
    )
    parser.add_argument(
        "--site",
        default=AUTO,
        metavar="NAME|PATH|auto",
        help="the site profile, as the login node's ddpimg knows it: a name, a file there "
        "(relative: to your home there), or auto (default): the login node's own choice",
    )
    parser.add_argument(
        "--follow", action="store_true", help="then follow the run, as ddpimg follow does"
    )
    parser.add_argument(
        "--interval", type=float, default=DEFAULT_INTERVAL_S, metavar="SECONDS",
        help="with --follow: " + remote_common.INTERVAL_HELP,
    )  # fmt: skip
    parser.add_argument(
        "--give-up", type=float, default=DEFAULT_GIVE_UP_S, metavar="SECONDS",
        help="with --follow: " + remote_common.GIVE_UP_HELP,
    )  # fmt: skip
    stage = parser.add_argument_group("staging")
    stage.add_argument(
        "--include",
        action="append",
        metavar="PATH",
        help="stage PATH (a file or directory under this one; repeatable) instead of what git "
        "would track",
    )
    stage.add_argument(
        "--max-stage-size", type=int, default=DEFAULT_MAX_MB, metavar="MB",
        help=f"refuse a tree larger than this (default {DEFAULT_MAX_MB})",
    )  # fmt: skip
    stage.add_argument(
        "--max-stage-files", type=int, default=DEFAULT_MAX_FILES, metavar="N",
        help=f"refuse a tree of more files than this (default {DEFAULT_MAX_FILES})",
    )  # fmt: skip
    stage.add_argument(
        "--remote-dir",
        default=programs.DEFAULT_ROOT,
        metavar="DIR",
        help="where staged trees and jobs go on the login node (relative: to your home "
        f"there; default {programs.DEFAULT_ROOT})",
    )
    stage.add_argument(
        "--remote-ddpimg",
        metavar="COMMAND",
        help="how to run ddpimg on the login node when ssh commands do not find it on PATH, "
        "e.g. ~/venv/bin/ddpimg",
    )
    sbatch_cmd.add_job_options(
        parser.add_argument_group(
            "job (ddpimg sbatch's options; default: site profile > built-in)"
        ),
        skip=NOT_HERE,
    )
    parser.add_argument(
        "--allow-retired", action="store_true", help="render for a retired site anyway"
    )
    add_sweep_arguments(parser, MAX_PARALLEL)
    parser.add_argument(
        "train_command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the command, after --: train TRAINER ... or train --script FILE ...",
    )


def job_words(args: argparse.Namespace) -> list[str]:
    """The job options given, as ``ddpimg sbatch`` words for the login node (add-ons are
    files here: they are staged, and their words made then)."""
    found: list[str] = []
    for field in FIELDS:
        value = getattr(args, field.name, None)
        if field.name in ("command", "addons") or value is None:
            continue
        # --name=VALUE: a value may start with a dash (--sbatch-option=--hold).
        found += [f"{field.option}={item}" for item in (value if field.kind is list else [value])]
    if args.allow_retired:
        found.append("--allow-retired")
    return found


def sweep_words(args: argparse.Namespace) -> list[str]:
    """The sweep's options given, as ``ddpimg sbatch`` words for the login node."""
    if not args.sweep:
        return []
    found = [f"--sweep={text}" for text in args.sweep]
    for flag, value in (
        ("--trials", args.trials),
        ("--sweep-seed", args.sweep_seed),
        ("--max-points", args.max_points),
        (MAX_PARALLEL, args.max_parallel),
    ):
        if value is not None:
            found.append(f"{flag}={value}")
    return found


def sweep_command(
    args: argparse.Namespace, command: list[str], env: dict[str, str]
) -> tuple[list[str], tuple[str, ...]]:
    """The command a sweep submits (with ``--out`` its directory, ``runs/SWEEP``, unless
    given) and its points' names, every point checked here before anything is staged."""
    parsed = TrainCommand(tuple(command))
    if parsed.kind != TRAIN:
        raise DdpimgError(
            "--sweep runs a train command, one point per array task",
            hint="ddpimg submit --host LOGIN --sweep lr=0.1,0.01 -- train mnist ...",
        )
    start = 1 if os.path.basename(command[0]) == "train" else 2
    plan = plan_sweep(args, command[start:], env, in_job=True)
    if plan.command.out is None:
        head = list(parsed.head)
        command = [*head, "--out", f"{DEFAULT_ROOT}/{plan.name}", *parsed.script]
    return command, tuple(point.name for point in plan.points)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    env = dict(os.environ)
    command = sbatch_cmd._command_words(args.train_command)
    for value, flag in ((args.max_stage_size, "--max-stage-size"),
                        (args.max_stage_files, "--max-stage-files")):  # fmt: skip
        remote_common.check_positive(value, flag)
    remote_common.check_positive(args.interval, "--interval")
    remote_common.check_positive(args.give_up, "--give-up")
    limits = Limits(args.max_stage_size << 20, args.max_stage_files)
    local_root = runs_root(env)
    tree = collect_tree(Path.cwd(), args.include or (), limits, outputs=local_root)
    check_command(command, tree)
    tree = with_addons(tree, args.addons or ())
    points: tuple[str, ...] = ()
    if sweep_given(args):
        if args.max_parallel is not None and args.max_parallel < 1:
            raise DdpimgError(
                f"{MAX_PARALLEL} {args.max_parallel}: must be at least 1",
                hint=f"{MAX_PARALLEL} 4",
            )
        command, points = sweep_command(args, command, env)
    remote_ddpimg = _remote_ddpimg(args.remote_ddpimg)
    path = remote_common.state_file(env)
    state.load(path)  # a state file that cannot be read is told before a job exists
    output, job_name = log_options(args.output, args.job_name, args.sbatch_options or ())
    request = Request(
        args.site,
        args.remote_dir,
        tuple(job_words(args) + sweep_words(args)),
        tuple(command),
        output=output,
        job_name=job_name,
        addons=tuple(args.addons or ()),
        points=points,
    )
    with remote_common.connect(args.host, env) as transport:
        host = transport.host
        login = check_login(transport, remote_ddpimg, args.site)
        remote_common.say(f"{host}: site {printable(login.site)}, {printable(login.where)}")
        submitted = submit(
            transport,
            login,
            tree,
            request,
            local_root=local_root,
            say=lambda words: remote_common.say(f"{host}: {words}"),
        )
        try:
            recorded = state.add(path, submitted)
        except (DdpimgError, OSError) as err:
            raise DdpimgError(
                f"{host}: job {submitted.job_id} was submitted (in {printable(submitted.workdir)}) "
                f"but could not be recorded here: {err}",
                hint=f"ssh {host} squeue -j {submitted.job_id} shows it, scancel "
                f"{submitted.job_id} cancels it; fix the record ({path}) before the next submit",
            ) from err
        remote_common.say(
            f"{host}: submitted job {recorded.job_id}, run {recorded.name} (in "
            f"{printable(recorded.workdir)})"
        )
        print(recorded.name, flush=True)
        if not args.follow:
            name = recorded.name
            remote_common.say(
                f"next: ddpimg follow {name}, ddpimg fetch {name}, ddpimg cancel {name}"
            )
            return exitcodes.OK
        return remote_common.follow(
            transport,
            recorded,
            path,
            reconnect=transport.reconnect,
            interval_s=args.interval,
            give_up_s=args.give_up,
        )


def _remote_ddpimg(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    try:
        words = tuple(shlex.split(text))
    except ValueError as err:
        raise DdpimgError(
            f"--remote-ddpimg {text!r}: cannot be split into words ({err})",
            hint="give the command as a shell would read it: --remote-ddpimg ~/venv/bin/ddpimg",
        ) from err
    if not words:
        raise DdpimgError("--remote-ddpimg is empty", hint="--remote-ddpimg ~/venv/bin/ddpimg")
    return words
