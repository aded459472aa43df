"""The training command of a job: what kind it is, and the options ddpimg adds to it.

A ``train`` (or ``ddpimg train``) command gets, unless the user already gave them:

- ``--site NAME``: the compute nodes use the profile the script was rendered for, whatever
  their own auto-detection would pick;
- ``--out "runs/${SLURM_JOB_ID}"``: a run directory of this job's own (a requeued job keeps
  its id), so ``--resume auto`` never picks up another job's checkpoints;
- ``--resume auto``: a requeued job goes on from its last checkpoint;
- ``--nproc-per-node G`` with ``--launch torchrun``: one launcher task per node starts G
  workers;
- ``--data``, where ``--data-image`` or ``--stage-data`` put the data (``ddpimg.jobs.data``).

They go before ``--script``, which takes the rest of the line. ``ddpimg doctor`` only gets
``--site``. Anything else runs as given.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

TRAIN = "train"
DOCTOR = "doctor"
LAUNCHER = "launcher"
OTHER = "other"
# Launchers that start their own processes: inside a task of an srun step each task would
# start a full set, and they do their own rank discovery (DeepSpeed's through `hostname -I`).
LAUNCHERS = ("torchrun", "deepspeed", "mpirun", "mpiexec", "accelerate")
TORCH_LAUNCH_MODULES = ("torch.distributed.run", "torch.distributed.launch", "deepspeed")
# Job-level, so it is expanded in the batch shell; double quotes keep it one word.
RUN_DIR = '"runs/${SLURM_JOB_ID}"'


@dataclass(frozen=True)
class TrainCommand:
    """A job's command split at ``--script`` (which must stay last)."""

    words: tuple[str, ...]

    @property
    def kind(self) -> str:
        """``train``, ``doctor``, ``launcher`` (torchrun, deepspeed, mpirun...) or ``other``."""
        if not self.words:
            return OTHER
        program = os.path.basename(self.words[0])
        if program == "train":
            return TRAIN
        if program == "ddpimg" and len(self.words) > 1:
            return {"train": TRAIN, "doctor": DOCTOR}.get(self.words[1], OTHER)
        if program in LAUNCHERS:
            return LAUNCHER
        if program.startswith("python") and self._module() in TORCH_LAUNCH_MODULES:
            return LAUNCHER
        return OTHER

    @property
    def launcher_name(self) -> str:
        """The launcher as the user wrote it: ``torchrun`` or ``python -m deepspeed``."""
        module = self._module()
        name = os.path.basename(self.words[0]) if self.words else ""
        return f"{name} -m {module}" if module and name.startswith("python") else name

    def _module(self) -> str:
        if len(self.words) > 2 and self.words[1] == "-m":
            return self.words[2]
        return ""

    @property
    def head(self) -> tuple[str, ...]:
        """The words before ``--script``: ddpimg's own options."""
        if "--script" in self.words:
            return self.words[: self.words.index("--script")]
        return self.words

    @property
    def script(self) -> tuple[str, ...]:
        """``--script FILE ARGS`` or nothing."""
        return self.words[len(self.head) :]

    def head_without(self, name: str) -> tuple[str, ...]:
        """``head`` without the option ``--name V`` / ``--name=V``."""
        kept: list[str] = []
        skip = False
        for word in self.head:
            if skip:
                skip = False
            elif word == name:
                skip = True
            elif not word.startswith(name + "="):
                kept.append(word)
        return tuple(kept)

    def option(self, name: str) -> str | None:
        """The value of ``--name V`` / ``--name=V`` among ddpimg's options, else None ("" when
        the option ends the line)."""
        head = self.head
        for i, word in enumerate(head):
            if word == name:
                return head[i + 1] if i + 1 < len(head) else ""
            if word.startswith(name + "="):
                return word[len(name) + 1 :]
        return None


def shell_words(
    command: TrainCommand,
    site: str,
    launch: str,
    workers_per_node: int,
    data: str | None = None,
    *,
    extra: Sequence[str] = (),
    point: str | None = None,
) -> list[str]:
    """The command as shell words for the batch script, with ddpimg's options added;
    ``data``: the shell word ``--data`` becomes (``ddpimg.jobs.data``), replacing the
    user's; ``extra``: shell words a train or doctor command gets besides (before
    ``--script``); ``point``: a sweep's array task (``ddpimg.jobs.array``): the shell word
    that holds the point's own options, its ``--out`` and its script, which end the line
    instead of the command's ``--out`` and script."""
    head = TrainCommand(command.head_without("--out")) if point is not None else command
    head_words = head.head if data is None else head.head_without("--data")
    quoted = [shlex.quote(word) for word in head_words]
    if data is not None:
        quoted += ["--data", data]
    if command.kind in (TRAIN, DOCTOR) and command.option("--site") is None:
        quoted += ["--site", shlex.quote(site)]
    if command.kind == TRAIN and not command.script:
        if command.option("--out") is None and point is None:
            quoted += ["--out", RUN_DIR]
        if command.option("--resume") is None:
            quoted += ["--resume", "auto"]
    if (
        command.kind == TRAIN
        and launch == "torchrun"
        and command.option("--nproc-per-node") is None
    ):
        quoted += ["--nproc-per-node", str(workers_per_node)]
    if command.kind in (TRAIN, DOCTOR):
        quoted += extra
    if point is not None:
        return [*quoted, point]
    return quoted + [shlex.quote(word) for word in command.script]
