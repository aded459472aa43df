"""Stub commands to run a rendered batch script on one machine without Slurm or a container:
``srun`` records its words and runs its command as one task; the runtimes, ``train``,
``scontrol``, ``module`` and the file commands of data staging (``mkdir``, ``cp``, ``rm``)
only record theirs, so that no path a test makes up is ever created or removed. Every call
is appended to one log (the argument count, then the words, NUL-separated), so a test sees
each argument exactly as the shell passed it. ``DDPIMG_STUB_FAIL=NAME`` makes stub NAME
exit 1.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

CALLS_VAR = "DDPIMG_STUB_CALLS"
RECORD = f'printf \'%s\\0\' "$#" "${{0##*/}}" "$@" >> "${CALLS_VAR}"\n'
SRUN = (
    "#!/bin/bash\n"
    + RECORD
    + "# srun's own options are single words (--nodes=2); the rest is the task's command.\n"
    'while [ "$#" -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done\n'
    'if [ "$#" -eq 0 ]; then exit 0; fi\n'
    "export SLURM_PROCID=0 SLURM_NODEID=0 SLURM_LOCALID=0\n"
    'exec "$@"\n'
)
FAIL_VAR = "DDPIMG_STUB_FAIL"
RECORDER = RECORD + f'if [ "${{{FAIL_VAR}:-}}" = "${{0##*/}}" ]; then exit 1; fi\n'
RECORDERS = ("apptainer", "singularity", "docker", "podman-hpc", "train", "ddpimg", "scontrol",
             "mkdir", "cp", "rm", "module")  # fmt: skip
# A hang guard only: a script with stubs runs in well under a second.
SCRIPT_TIMEOUT_S = 60


@dataclass(frozen=True)
class Call:
    program: str
    argv: list[str]


@dataclass(frozen=True)
class ScriptRun:
    returncode: int
    stderr: str
    calls: list[Call]


def install_stubs(directory: Path) -> Path:
    """Write the stubs into ``directory``; returns it (put it first on PATH)."""
    programs = {"srun": SRUN, **{name: "#!/bin/bash\n" + RECORDER for name in RECORDERS}}
    for name, text in programs.items():
        path = directory / name
        path.write_text(text)
        path.chmod(0o755)
    return directory


def read_calls(log: Path) -> list[Call]:
    """The calls recorded in ``log``, in order."""
    if not log.exists():
        return []
    fields = log.read_bytes().decode().split("\0")[:-1]
    calls = []
    while fields:
        count, program, *rest = fields
        calls.append(Call(program, rest[: int(count)]))
        fields = rest[int(count) :]
    return calls


def run_script(
    script: str, work: Path, stub_dir: Path, extra_env: Mapping[str, str] | None = None
) -> ScriptRun:
    """Run ``script`` with bash in ``work`` as a 2-node job's batch shell would, the stubs
    first on PATH (and ``extra_env`` set)."""
    path = work / "job.sh"
    path.write_text(script)
    log = work / "calls.log"
    (work / "local").mkdir(exist_ok=True)
    env = {
        "PATH": f"{stub_dir}:{os.defpath}",
        "HOME": str(work),
        "TMPDIR": str(work / "local"),
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_JOB_NUM_NODES": "2",
        CALLS_VAR: str(log),
        **(extra_env or {}),
    }
    proc = subprocess.run(
        ["bash", str(path)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        check=False,
    )
    return ScriptRun(proc.returncode, proc.stderr, read_calls(log))
