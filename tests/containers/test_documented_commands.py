"""Every documented command line that starts the image runs there (`nox -s smoke`): its
command part, expanded by a host shell the way the user's would (a login node with no
ddpimg installed), runs inside the CPU image.

The lines are found in README.md and docs/ by tests/docs_commands.py. To run on this
machine's CPUs within CI's time, training lines get a short run appended (the last value of an
option wins: synthetic data, two steps, the local profile, an output directory of their own)
and at most 2 processes (MAX_PROCESSES); lines that differ only in those options run once.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.containers.test_smoke import docker_run
from tests.docs_commands import DocumentedCommand, documented_commands

pytestmark = pytest.mark.docker

QUICK = ["--data", "synthetic", "--epochs", "1", "--max-steps", "2", "--train-samples", "256",
         "--eval-samples", "64", "--site", "local", "--out", "/tmp/documented"]  # fmt: skip
# Options whose value the quick run replaces, for telling lines apart.
REPLACED = ("--data", "--epochs", "--site", "--out")
PROCESSES = re.compile(r"(--nproc-per-node|--num_gpus)(\s+|=)(\d+)")
# This machine's 2 cores. DeepSpeed's launcher gets one.
MAX_PROCESSES = {"--nproc-per-node": 2, "--num_gpus": 1}
# A hang guard, not a verdict: 5x the slowest line. That is DeepSpeed's launcher, whose rank
# JIT-compiled DeepSpeed's CPU communication op in every fresh container of the image built
# from the CUDA torch (on a 2-core machine, 2026-11-26: 132 s with the smoke session alone,
# 232 s beside the multinode session, 316 s beside the integration tests); the cpu image
# carries that op built (12 s, 2026-11-29, load average about 4).
HANG_GUARD_S = 5 * 320
# A login node's shell: no ddpimg on PATH, the job's variables set.
HOST_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "SLURM_JOB_ID": "1"}


def host_words(command: str) -> list[str]:
    """``command`` as the host's shell splits and expands it."""
    proc = subprocess.run(
        ["bash", "-c", f'printf "%s\\0" {command}'],
        env=HOST_ENV,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return proc.stdout.split("\0")[:-1]


def runnable(command: DocumentedCommand) -> list[str]:
    """The command part, at most MAX_PROCESSES processes and a short run for trainings."""
    text = PROCESSES.sub(
        lambda m: f"{m[1]}{m[2]}{min(int(m[3]), MAX_PROCESSES[m[1]])}", command.command
    )
    words = host_words(text)
    trains = "train" in words and "--help" not in words
    return [*words, *QUICK] if trains else words


def key(words: list[str]) -> tuple[str, ...]:
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in REPLACED:
            skip = True
        else:
            kept.append(word)
    return tuple(kept)


def distinct() -> list[tuple[DocumentedCommand, list[str]]]:
    seen: set[tuple[str, ...]] = set()
    out = []
    for command in documented_commands():
        words = runnable(command)
        if key(words) not in seen:
            seen.add(key(words))
            out.append((command, words))
    return out


@pytest.mark.parametrize(("documented", "words"), distinct(), ids=lambda v: getattr(v, "where", ""))
def test_documented_command_runs_in_the_image(
    image: str, documented: DocumentedCommand, words: list[str]
) -> None:
    proc = docker_run(image, words, timeout=HANG_GUARD_S, check=False, options=["--shm-size=1g"])
    output = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0, f"{documented.where}: {documented.line}\nran: {words}\n{output}"
