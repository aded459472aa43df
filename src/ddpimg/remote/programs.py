"""The shell programs the login node runs, one a function, and how they travel.

Each program is POSIX ``sh``; every value put into one is quoted for ``sh`` here
(``shlex.quote``, or ``home_word`` for a path under the remote home), never by the caller.
Large inputs (the names of the files to stage, the tree itself) arrive on the program's
standard input as data. ``command_line`` wraps a program for ssh: the login shell, whatever
it is (bash, tcsh, zsh), is handed ``exec /bin/sh -c '...'`` with the program base64-encoded
inside, so nothing of it is the login shell's to interpret.

The layout on the login node, under the remote directory (``--remote-dir``, by default
``ddpimg-remote`` in the home directory)::

    objects/ab/abcdef...        staged files by content (sha256; "-x": executable), read-only
    jobs/STEM-TIME-XXXXXX/      one submission: the tree (hard links to objects), job.sh,
                                and under the directory the command runs in, the job's log
                                (ddpimg-JOBID.out) and its run (runs/...)

Exit statuses of the programs besides the commands' own: ``MISSING`` (a directory or file
that is not there).
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Sequence

from ddpimg.remote.slurm_pattern import Field, pattern_parts

MISSING = 3
TAR_FAILED = 4
CHECK_FAILED = 5
# scontrol's "Invalid job id": Slurm does not know the job (any longer), as against a
# controller that did not answer.
UNKNOWN_JOB = 6
DEFAULT_ROOT = "ddpimg-remote"
OBJECTS = "objects"
JOBS = "jobs"
INCOMING = "incoming"
JOB_SCRIPT = "job.sh"
PRELUDE = "set -u\n"

q = shlex.quote


def command_line(program: str) -> str:
    """``program`` as the one command line ssh passes to the login shell."""
    # surrogateescape: an argument that came as bytes that are not UTF-8 (a file name) goes
    # as those bytes.
    encoded = base64.b64encode(program.encode("utf-8", "surrogateescape")).decode("ascii")
    return f"exec /bin/sh -c 'eval \"$(echo {encoded} | base64 -d)\"'"


def home_word(path: str) -> str:
    """A path for the remote shell: ``~/x`` and relative paths are under the remote home
    (``"$HOME"/x``), the rest quoted as it is."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        path = path[2:]
    elif path.startswith("/"):
        return q(path)
    return '"$HOME"/' + q(path or ".")


def words(argv: Sequence[str]) -> str:
    """``argv`` as quoted shell words; a first word ``~/...`` is under the remote home."""
    quoted = [q(word) for word in argv]
    if argv and argv[0].startswith("~/"):
        quoted[0] = home_word(argv[0])
    return " ".join(quoted)


def probe() -> str:
    """What the login node has: lines ``NAME VALUE`` (``which-sbatch /usr/bin/sbatch``,
    ``home /home/me``, ``path ...``), each value on one line."""
    return PRELUDE + (
        "for c in sbatch scontrol scancel tar sha256sum ddpimg; do\n"
        '    printf \'which-%s %s\\n\' "$c" "$(command -v "$c" 2>/dev/null | head -n 1)"\n'
        "done\n"
        "printf 'home %s\\n' \"$HOME\"\n"
        "printf 'path %s\\n' \"$PATH\"\n"
    )


def ddpimg_command(ddpimg: Sequence[str], argv: Sequence[str]) -> str:
    """Run ddpimg on the login node (``ddpimg env --json ...``) from the home directory."""
    return PRELUDE + f"cd || exit {MISSING}\nexec {words(ddpimg)} {words(argv)}\n"


def missing_objects(root: str) -> str:
    """Of the object names on stdin (one a line), print those the store lacks."""
    return PRELUDE + (
        f"if ! cd {home_word(root)}/{OBJECTS} 2>/dev/null; then cat; exit 0; fi\n"
        "while IFS= read -r name; do\n"
        '    [ -f "$name" ] || printf \'%s\\n\' "$name"\n'
        "done\n"
    )


def unpack(root: str, job: str, token: str) -> str:
    """Unpack the tar stream on stdin (``stage``: new objects under incoming/TOKEN/, their
    sums in incoming/TOKEN.sha256, the tree under jobs/JOB/ as hard links), check the new
    objects' sums, then move them into the store. A stream cut short leaves nothing: the
    submission's directory and the incoming objects are removed."""
    incoming = f"{INCOMING}/{token}"
    return PRELUDE + (
        f"mkdir -p {home_word(root)} && cd {home_word(root)} || exit {MISSING}\n"
        f"mkdir -p {OBJECTS} {JOBS} {INCOMING} || exit {MISSING}\n"
        f"fail() {{ rm -rf {q(incoming)} {q(incoming)}.sha256 {JOBS}/{q(job)}; exit $1; }}\n"
        f"tar -xf - || fail {TAR_FAILED}\n"
        f"if [ -s {q(incoming)}.sha256 ]; then\n"
        f"    (cd {q(incoming)} && sha256sum -c --quiet ../{q(token)}.sha256) ||\n"
        f"        fail {CHECK_FAILED}\n"
        f"    (cd {q(incoming)} && for f in */*; do\n"
        f'        mkdir -p "../../{OBJECTS}/${{f%/*}}" &&\n'
        f'            mv -f "$f" "../../{OBJECTS}/$f" || exit 1\n'
        f"    done) || fail {TAR_FAILED}\n"
        "fi\n"
        f"rm -rf {q(incoming)} {q(incoming)}.sha256\n"
        f"cd {JOBS}/{q(job)} && pwd -P\n"
    )


def submit(
    root: str,
    job: str,
    subdir: str,
    *,
    ddpimg: Sequence[str],
    sbatch_args: Sequence[str],
    command: Sequence[str],
) -> str:
    """In the submission's directory (``subdir`` of its tree): ``ddpimg sbatch ARGS -o
    JOB/job.sh --submit -- COMMAND``, as a user would there. Prints ``workdir DIR`` and
    ``jobid ID``. Runs without ``--out`` go under the directory's own runs/."""
    return PRELUDE + (
        f"cd {home_word(root)}/{JOBS}/{q(job)} || exit {MISSING}\n"
        "jobdir=$(pwd -P)\n"
        f"cd ./{q(subdir)} || exit {MISSING}\n"
        "printf 'workdir %s\\n' \"$(pwd -P)\"\n"
        'DDPIMG_RUNS="$(pwd -P)/runs"\n'
        "export DDPIMG_RUNS\n"
        f'id=$({words(ddpimg)} sbatch {words(sbatch_args)} -o "$jobdir"/{JOB_SCRIPT} '
        f"--submit -- {words(command)}) || exit $?\n"
        "printf 'jobid %s\\n' \"$id\"\n"
    )


def job_state(job_id: str) -> str:
    """Slurm's record of the job, one line (``scontrol show job -o``); UNKNOWN_JOB when
    Slurm answers that it does not know the job, scontrol's own status for anything else
    (its error on stderr)."""
    return PRELUDE + (
        "e=$(mktemp) || exit 1\n"
        f'scontrol show job -o {q(job_id)} 2>"$e"\n'
        "s=$?\n"
        'if [ "$s" -ne 0 ] && grep -q "Invalid job id" "$e"; then\n'
        f'  rm -f "$e"; exit {UNKNOWN_JOB}\nfi\n'
        'cat "$e" >&2\nrm -f "$e"\nexit "$s"\n'
    )


def read_from(path: str, start: int, limit: int) -> str:
    """At most ``limit`` bytes of the file ``path`` from byte ``start`` on; MISSING when
    it is not there."""
    return PRELUDE + (
        f"f={home_word(path)}\n"
        f'[ -f "$f" ] || exit {MISSING}\n'
        f'tail -c +{int(start) + 1} "$f" | head -c {int(limit)}\n'
    )


def log_words(pattern: str) -> str:
    """The log's Slurm filename ``pattern`` (``ddpimg.remote.slurm_pattern``) as one shell
    word that globs for the files Slurm may have made of it: ``/w/logs/"$u"-*-7.out``
    (``$u``: the login's user, the job's, set by ``newest_log``)."""
    words = [
        ('"$u"' if part.letter == "u" else "*") if isinstance(part, Field) else q(part)
        for part in pattern_parts(pattern)
    ]
    return "".join(words) or "''"


def newest_log(pattern: str) -> str:
    """Shell lines that set ``f`` to the newest regular file ``pattern`` names (empty when
    none does)."""
    return (
        "u=$(id -un 2>/dev/null) || u=\n"
        "f=\n"
        f"for c in {log_words(pattern)}; do\n"
        '    if [ -f "$c" ] && { [ -z "$f" ] || [ "$c" -nt "$f" ]; }; then f=$c; fi\n'
        "done\n"
    )


def tail_of(path: str, limit: int) -> str:
    """The last ``limit`` bytes of the log ``path`` (a Slurm filename pattern: the newest
    file it names); MISSING when there is none."""
    return (
        PRELUDE + newest_log(path) + (f'[ -n "$f" ] || exit {MISSING}\ntail -c {int(limit)} "$f"\n')
    )


def pack(
    run_dir: str,
    names: Sequence[str],
    suffixes: Sequence[str],
    newest_checkpoint: bool,
    extra: Sequence[str],
    *,
    log: str = "",
) -> str:
    """A tar stream on stdout: the entries ``names`` of the run directory that exist, its
    files ending in ``suffixes`` (plots), the newest ``checkpoints/step-N`` with
    ``newest_checkpoint``, the files ``extra`` (absolute paths: the job's script) by their
    own names, and the newest file the ``log`` pattern names (``tail_of``) by its name.
    MISSING when none of them is there."""
    if not all(suffix.isalnum() for suffix in suffixes):
        raise ValueError(f"suffixes must be letters and digits: {suffixes}")
    globs = " ".join(f"*.{suffix}" for suffix in suffixes)
    lines = [
        "set --",
        f"if cd {home_word(run_dir)} 2>/dev/null; then",
        f"    for f in {' '.join(q(name) for name in names)} {globs}; do",
        '        if [ -e "$f" ]; then set -- "$@" "./$f"; fi',
        "    done",
    ]
    if newest_checkpoint:
        lines += [
            # By the number (POSIX sort's numeric key): step-100000000 after step-99999999.
            "    newest=$(ls -1 checkpoints 2>/dev/null | grep -E '^step-[0-9]{8,}$' | "
            "sort -t - -k 2,2n | tail -n 1)",
            '    if [ -n "$newest" ]; then set -- "$@" "./checkpoints/$newest"; fi',
        ]
    lines.append("fi")
    for path in extra:
        folder, _, name = path.rpartition("/")
        lines.append(
            f'if [ -f {home_word(path)} ]; then set -- "$@" -C {home_word(folder or "/")} '
            f"./{q(name)}; fi"
        )
    if log:
        lines += [
            newest_log(log).rstrip("\n"),
            'if [ -n "$f" ]; then set -- "$@" -C "$(dirname -- "$f")" "./${f##*/}"; fi',
        ]
    lines += [f'if [ "$#" -eq 0 ]; then exit {MISSING}; fi', 'exec tar -cf - "$@"']
    return PRELUDE + "\n".join(lines) + "\n"


def cancel(job_id: str) -> str:
    return PRELUDE + f"exec scancel {q(job_id)}\n"


def sweep_points(directory: str, names: Sequence[str], manifest_limit: int, tail: int) -> str:
    """For each point ``names`` of the sweep in ``directory``: a line ``point NAME``, then
    (when there) ``manifest B64`` (its manifest.json, at most ``manifest_limit`` bytes) and
    ``metrics B64`` (the last ``tail`` bytes of its metrics.jsonl), each base64 on one line;
    MISSING when the directory is not there."""
    return PRELUDE + (
        f"cd {home_word(directory)} 2>/dev/null || exit {MISSING}\n"
        f"for p in {' '.join(q(name) for name in names)}; do\n"
        "    printf 'point %s\\n' \"$p\"\n"
        '    if [ -f "$p/manifest.json" ]; then\n'
        f"        printf 'manifest '; head -c {int(manifest_limit)} \"$p/manifest.json\" | "
        "base64 | tr -d '\\n'; echo\n"
        "    fi\n"
        '    if [ -f "$p/metrics.jsonl" ]; then\n'
        f"        printf 'metrics '; tail -c {int(tail)} \"$p/metrics.jsonl\" | "
        "base64 | tr -d '\\n'; echo\n"
        "    fi\n"
        "done\n"
    )
