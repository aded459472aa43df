"""The command lines README.md and docs/ give that start the image (``apptainer exec ...
IMAGE COMMAND``, ``docker run ... IMAGE COMMAND``, ``podman-hpc shared-run``, ``srun
--container-image=``, ``srun --environment=``), found programmatically: the lines of shell
code blocks (continuations joined) and the inline code spans of the text and tables.

A line's command part is what follows the image. The host's shell expands the whole line
before the container starts, so the command part must not ask the host anything about the
container (``$(which train)`` is looked up outside, where there is no ``train``):
tests/test_documented_commands.py checks that for every line, and
tests/containers/test_documented_commands.py runs every command part inside the CPU image.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# docs/sbatch-examples.md is the renderer's output, checked by its own tests (the golden
# files; the smoke tests run the rendered docker and podman-hpc lines).
DOCUMENTS = [
    REPO / "README.md",
    *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "sbatch-examples.md"),
]
# What starts a container, as a command's first words; srun's own plugins by an option.
RUNTIME_WORDS = (
    ("apptainer", "exec"),
    ("apptainer", "run"),
    ("singularity", "exec"),
    ("singularity", "run"),
    ("docker", "run"),
    ("podman-hpc", "run"),
    ("podman-hpc", "shared-run"),
)
SRUN_CONTAINER_OPTIONS = ("--container-image=", "--environment=")
# An image name; placeholders such as IMAGE.sif or FILE are not images.
IMAGE = re.compile(r"(^|/)([a-z0-9][\w.+-]*\.(sif|sqsh)|ddpimg:[a-z0-9-]+)$")
# `apptainer run IMAGE ARGS` gives ARGS to the image's runscript, which is `train`.
RUNSCRIPT = "train"
_CODE_SPAN = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class DocumentedCommand:
    """One documented line that starts the image: where it is, the whole line, the image
    and the command part as written (unexpanded)."""

    where: str
    line: str
    image: str
    command: str


def _shell_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the shell code blocks, continuations joined, comments cut."""
    found: list[tuple[int, str]] = []
    inside = False
    pending = ""
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            inside = not inside and line.strip() in ("```sh", "```bash", "```shell")
            continue
        if not inside:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        found.append((start, pending + line))
        pending = ""
    return found


def _code_spans(text: str) -> list[tuple[int, str]]:
    spans: list[tuple[int, str]] = []
    inside = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if not inside:
            spans += [(number, span) for span in _CODE_SPAN.findall(line)]
    return spans


def _words(line: str) -> list[str] | None:
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return None


def _command_of(line: str) -> DocumentedCommand | None:
    words = _words(line)
    if not words:
        return None
    starts = [i for i in range(len(words) - 1) if (words[i], words[i + 1]) in RUNTIME_WORDS] + [
        i
        for i, word in enumerate(words)
        if word.startswith(SRUN_CONTAINER_OPTIONS) and "srun" in words[:i]
    ]
    if not starts:
        return None
    if any(words[i].startswith(SRUN_CONTAINER_OPTIONS) for i in starts):
        option = next(w for w in words if w.startswith(SRUN_CONTAINER_OPTIONS))
        image = option.split("=", 1)[1]
        rest = words[words.index(option) + 1 :]
        first = next((w for w in rest if not w.startswith("-")), None)
        anchor = first
    else:
        image = next((w for w in words[starts[0] + 2 :] if IMAGE.search(w)), "")
        anchor = image
    if not IMAGE.search(image) or anchor is None:
        return None
    # The command part as written: the text after the anchor word (the image, or for srun's
    # plugins the command's first word, which stays), without a trailing comment.
    raw = re.split(r"\s#\s", line, maxsplit=1)[0]
    position = raw.find(anchor, raw.find(image) if anchor != image else 0)
    command = raw[position + (len(anchor) if anchor == image else 0) :].strip()
    if (
        anchor == image
        and words[starts[0]] in ("apptainer", "singularity")
        and (words[starts[0] + 1] == "run")
    ):
        command = f"{RUNSCRIPT} {command}"
    if not command or "..." in command:
        return None
    return DocumentedCommand("", line.strip(), image, command)


def documented_commands() -> list[DocumentedCommand]:
    """Every documented line that starts the image, in document order."""
    found: list[DocumentedCommand] = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        for number, line in _shell_lines(text) + _code_spans(text):
            command = _command_of(line)
            if command is not None:
                where = f"{document.relative_to(REPO)}:{number}"
                found.append(DocumentedCommand(where, command.line, command.image, command.command))
    return found


def host_substitutions(command: str) -> list[str]:
    """The parts of ``command`` the host's shell would run before the container starts:
    command substitutions outside single quotes."""
    outside = re.sub(r"'[^']*'", "''", command)
    return re.findall(r"\$\([^)]*\)|`[^`]*`", outside)
