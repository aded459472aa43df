"""``ddpimg submit``: stage the tree, render the job on the login node with ``ddpimg sbatch``
(the same code, with the site's facts where they are), submit it, and say what became of it:
the job id, and the run's name that ``follow``, ``fetch`` and ``cancel`` take.

Where the run's files will be is known before the job starts: a bundled trainer without
``--out`` writes ``runs/JOBID`` in the directory the job runs in (``ddpimg sbatch`` adds that
``--out``), a script ``runs/SCRIPT-JOBID`` there (the submit program points ``DDPIMG_RUNS``
at it), and an ``--out`` given is taken as given. A sweep (``--sweep``) is one array job,
named ``STEM-sweep-JOBID``: its directory is the ``--out`` the laptop gives its command
(``runs/SWEEP``), each point's a directory there, each task's log ``%x-%A_%a.out``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from ddpimg.errors import DdpimgError, printable
from ddpimg.jobs.command import TRAIN, TrainCommand
from ddpimg.remote import programs
from ddpimg.remote.login import LoginNode, parse_facts, remote_said
from ddpimg.remote.slurm_pattern import fill
from ddpimg.remote.stage import Staged, stage_tree
from ddpimg.remote.state import RemoteRun
from ddpimg.remote.transport import Transport
from ddpimg.remote.tree import Tree, TreeFile, describe_size
from ddpimg.runs.names import DEFAULT_ROOT, run_name, stem_of, time_tag

DEFAULT_TRAINER = "mnist"
TRAINER_NAMES = ("mnist", "toy", "resnet", "gpt")
DEFAULT_LOG = "%x-%j.out"  # ddpimg sbatch's (ddpimg.jobs.fields), with %x the job's name
ARRAY_LOG = "%x-%A_%a.out"  # an array's (a sweep's)
DEFAULT_JOB_NAME = "ddpimg"
SUBMIT_TIMEOUT_S = 180.0
_JOB_ID = re.compile(r"\d{1,20}")
ADDON_DIR = ".ddpimg-addons"  # where a submission's add-ons are staged


@dataclass(frozen=True)
class Request:
    """What to submit: ``sbatch_args`` are ``ddpimg sbatch``'s job options as words;
    ``output`` and ``job_name`` those among them (the log's name), if given; ``addons``:
    the add-on files here (``--addon``), staged with the tree and mounted by the job."""

    site: str
    remote_dir: str
    sbatch_args: tuple[str, ...]
    command: tuple[str, ...]
    output: str | None = None
    job_name: str | None = None
    addons: tuple[str, ...] = ()
    points: tuple[str, ...] = ()  # a sweep's points, in the order of their array tasks


def with_addons(tree: Tree, addons: Sequence[str]) -> Tree:
    """``tree`` plus each add-on file at ``.ddpimg-addons/NAME.addon.sqsh`` of the submission:
    staged by content like the rest (a second submit of the same add-on sends nothing), and
    outside the tree's limits (an add-on is one file the user named)."""
    from ddpimg.addon.sitepath import mount_name
    from ddpimg.addon.sources import sha256_of
    from ddpimg.addon.squashfs import is_squashfs

    extra: list[TreeFile] = []
    for given in addons:
        path = Path(given).absolute()
        name = mount_name(path.name)
        if not is_squashfs(path):
            raise DdpimgError(
                f"--addon {printable(given)}: no add-on file there (a squashfs NAME.addon.sqsh)",
                hint="give the file ddpimg addon build wrote, on this machine",
            )
        extra.append(
            TreeFile(f"{ADDON_DIR}/{name}.addon.sqsh", sha256_of(path), path.stat().st_size,
                     executable=False, local=str(path))
        )  # fmt: skip
    return dataclasses.replace(tree, files=(*tree.files, *extra))


def addon_words(job_dir: str, addons: Sequence[str]) -> list[str]:
    """``ddpimg sbatch``'s ``--addon`` words for the staged add-ons, on the login node."""
    from ddpimg.addon.sitepath import mount_name

    return [
        f"--addon={job_dir}/{ADDON_DIR}/{mount_name(Path(given).name)}.addon.sqsh"
        for given in addons
    ]


def stem_for(command: Sequence[str]) -> str:
    """The first part of the run's name: the trainer, the script's name, or the program."""
    parsed = TrainCommand(tuple(command))
    if parsed.kind == TRAIN:
        if parsed.script:
            return stem_of(
                PurePosixPath(parsed.script[1] if len(parsed.script) > 1 else "script").stem
            )
        return next((word for word in parsed.head if word in TRAINER_NAMES), DEFAULT_TRAINER)
    return stem_of(PurePosixPath(command[0]).name if command else "job")


def check_command(command: Sequence[str], tree: Tree) -> None:
    """The command can run from the staged tree: a script given by a relative path is in it."""
    if not command:
        raise DdpimgError(
            "no command after --",
            hint="ddpimg submit --host LOGIN -- train mnist --epochs 1 (or train --script FILE)",
        )
    parsed = TrainCommand(tuple(command))
    if parsed.kind != TRAIN or len(parsed.script) < 2:
        return
    script = parsed.script[1]
    if script.startswith(("/", "~")):
        return  # a file on the cluster
    staged = os.path.normpath(os.path.join(tree.subdir, script)).replace(os.sep, "/")
    if staged.startswith("../") or not tree.has(staged):
        where = {"git": "what git tracks or would add", "--include": "the --include paths"}
        raise DdpimgError(
            f"train --script {printable(script)}: {printable(staged)} is not in the tree to stage "
            f"({where.get(tree.source, 'nothing: not in a git work tree')}, from {tree.root})",
            hint="git add it (or take it out of .gitignore), or name it with --include; a file "
            "already on the cluster is given by its absolute path",
        )


def run_dir_for(command: Sequence[str], workdir: str, job_id: str) -> str:
    """Where the job's run writes, on the login node (empty: a command that makes no run)."""
    parsed = TrainCommand(tuple(command))
    if parsed.kind != TRAIN:
        return ""
    out = parsed.option("--out")
    if out:
        return out if out.startswith("/") else f"{workdir}/{out}"
    if parsed.script and len(parsed.script) > 1:
        name = run_name(stem_of(PurePosixPath(parsed.script[1]).stem), job_id)
        return f"{workdir}/{DEFAULT_ROOT}/{name}"
    return f"{workdir}/{DEFAULT_ROOT}/{job_id}"


def log_for(
    workdir: str, job_id: str, output: str | None, job_name: str | None, array: bool = False
) -> str:
    """The job's log, a Slurm filename pattern (``slurm_pattern``): ``--output``'s with the
    job's id and name put in (``%A``, ``%x``, and ``%j`` but in an array, whose tasks have
    ids of their own); the others (``%u``, ``%N``) are found on the login node when the log
    is read (``programs.newest_log``). An array's keeps ``%a``, each task's index."""
    values = {"A": job_id, "x": job_name or DEFAULT_JOB_NAME}
    if not array:
        values["j"] = job_id
    path = fill(output or (ARRAY_LOG if array else DEFAULT_LOG), values)
    return path if path.startswith("/") else f"{workdir}/{path}"


_OUTPUT = re.compile(r"^(?:--output=|-o)(?P<value>.+)$")
_JOB_NAME = re.compile(r"^(?:--job-name=|-J)(?P<value>.+)$")


def log_options(
    output: str | None, job_name: str | None, sbatch_options: Sequence[str]
) -> tuple[str | None, str | None]:
    """The ``--output`` and ``--job-name`` the job gets: ``--sbatch-option``'s (each one
    word, after ddpimg sbatch's own in the script, so the last of them wins), else those
    given as ddpimg's options."""
    for option in sbatch_options:
        if match := _OUTPUT.match(option):
            output = match["value"]
        elif match := _JOB_NAME.match(option):
            job_name = match["value"]
    return output, job_name


def submission_name(stem: str, now: datetime) -> str:
    """The submission's directory name under jobs/: ``STEM-TIME-XXXXXX``."""
    return f"{stem}-{time_tag(now)}-{secrets.token_hex(3)}"


def submit(
    transport: Transport,
    login: LoginNode,
    tree: Tree,
    request: Request,
    *,
    local_root: Path,
    say: Callable[[str], None],
    now: datetime | None = None,
) -> RemoteRun:
    """Stage, render and submit; the run as the state file records it."""
    now = now or datetime.now(timezone.utc)
    stem = stem_for(request.command)
    job = submission_name(stem, now.astimezone())
    staged = stage_tree(transport, tree, request.remote_dir, job)
    say(_staged_words(tree, staged))
    site = [] if login.site_arg is None else ["--site", login.site_arg]
    addons = addon_words(staged.job_dir, request.addons)
    answer = transport.run(
        programs.submit(
            request.remote_dir,
            job,
            tree.subdir,
            ddpimg=login.ddpimg,
            sbatch_args=[*site, *request.sbatch_args, *addons],
            command=request.command,
        ),
        "ddpimg sbatch --submit on the login node",
        timeout=SUBMIT_TIMEOUT_S,
    )  # fmt: skip
    for line in answer.error_text.splitlines():
        if line.startswith("ddpimg: warning: "):
            say(f"{transport.host}: {printable(line[len('ddpimg: ') :][:500])}")
    facts = parse_facts(answer.text)
    # The job id as it came, printable or not: the message shows it escaped.
    said_id = next((line[6:] for line in answer.text.splitlines() if line.startswith("jobid ")), "")
    job_id = said_id if _JOB_ID.fullmatch(said_id) else ""
    workdir = facts.get("workdir", "")
    if answer.status == 0 and not (job_id and workdir.startswith("/")):
        raise DdpimgError(
            f"{transport.host}: the login node's answer is not a job id and a directory "
            f"(job id '{printable(said_id[:100])}', directory '{printable(workdir[:200])}')",
            hint="check its sbatch (sbatch --parsable must print the job id); nothing is "
            "recorded here",
        )
    if answer.status != 0:
        raise DdpimgError(
            f"{transport.host}: ddpimg sbatch did not submit the job: {remote_said(answer)}",
            hint="fix what it says with the matching ddpimg submit option (the same as ddpimg "
            f"sbatch's); the staged tree stays in {request.remote_dir}/{programs.JOBS}/{job}",
        )
    name = f"{stem}-sweep-{job_id}" if request.points else f"{stem}-{job_id}"
    array = bool(request.points)
    return RemoteRun(
        name=name,
        host=transport.host,
        job_id=job_id,
        job_dir=staged.job_dir,
        workdir=workdir,
        run_dir=run_dir_for(request.command, workdir, job_id),
        log=log_for(workdir, job_id, request.output, request.job_name, array),
        submitted_utc=now.isoformat(timespec="seconds").replace("+00:00", "Z"),
        site=login.site,
        command=tuple(request.command),
        local_dir=str((local_root / name).absolute()),
        state="SUBMITTED",
        points=request.points,
    )


def _staged_words(tree: Tree, staged: Staged) -> str:
    if not tree.files:
        return "staged no files (not in a git work tree, and no --include)"
    sent = f"{staged.new_files} new ({describe_size(staged.new_bytes)})"
    there = staged.files - staged.new_files
    return (
        f"staged {staged.files} files ({describe_size(tree.size)}, {tree.source}): {sent}, "
        f"{there} already there"
    )
