"""Every documented command line that starts the image leaves its command part to the
container: nothing in it is run by the host's shell (tests/docs_commands.py finds them;
tests/containers/test_documented_commands.py runs them in the CPU image)."""

from __future__ import annotations

import pytest

from tests.docs_commands import (
    DocumentedCommand,
    _command_of,
    documented_commands,
    host_substitutions,
)

COMMANDS = documented_commands()


def test_the_documents_have_container_lines_to_check() -> None:
    images = {command.image for command in COMMANDS}
    assert {"ddp.sif", "ddpimg:cpu"} <= images
    assert any(command.command.startswith("deepspeed ") for command in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.where)
def test_nothing_in_a_container_command_runs_on_the_host(command: DocumentedCommand) -> None:
    assert host_substitutions(command.command) == [], command.line


@pytest.mark.parametrize(
    ("line", "image", "command"),
    [
        ("srun apptainer exec --nv --bind /a:/b ddp.sif train --site x", "ddp.sif",
         "train --site x"),
        ('docker run --rm -v "$PWD:/o" ddpimg:cpu ddpimg doctor  # check', "ddpimg:cpu",
         "ddpimg doctor"),
        ("apptainer run --nv ddp.sif --help", "ddp.sif", "train --help"),
        ("srun --container-image=./ddpimg+gpu.sqsh --container-mounts=/a:/a train",
         "./ddpimg+gpu.sqsh", "train"),
        ("apptainer exec IMAGE.sif train ...", None, None),  # a placeholder
        ("srun -n 4 train", None, None),  # no container
    ],
)  # fmt: skip
def test_command_part_of_a_line(line: str, image: str | None, command: str | None) -> None:
    found = _command_of(line)
    actual = (found.image, found.command) if found else (None, None)
    assert actual == (image, command)


@pytest.mark.parametrize(
    ("command", "substitutions"),
    [
        ("deepspeed --num_gpus 4 $(which train) --strategy deepspeed", ["$(which train)"]),
        ("train --out `pwd`/runs", ["`pwd`"]),
        ("bash -c 'deepspeed \"$(which train)\"'", []),  # the container's shell runs it
        ("train --out runs/$SLURM_JOB_ID", []),  # the job's id: the same on both sides
    ],
)
def test_host_substitutions(command: str, substitutions: list[str]) -> None:
    assert host_substitutions(command) == substitutions
