"""Read the container recipes: containers/Dockerfile's instructions and the Apptainer .def files.

The Dockerfile reader knows just enough of the syntax the project's Dockerfile uses
(comments, backslash continuations, `ENV`/`LABEL` key=value lists, JSON-form `CMD` and
`ENTRYPOINT`); the .def files are parsed by spython (the Singularity/Apptainer recipe parser),
plus the two header lines it does not return as written.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS = ROOT / "containers"
DOCKERFILE = CONTAINERS / "Dockerfile"
DEFS = {"ddp.def": CONTAINERS / "ddp.def", "ddp-standalone.def": CONTAINERS / "ddp-standalone.def"}


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    args: str
    stage: int  # 0 before the first FROM (global ARGs), then 1, 2, ...


def load_script(name: str) -> ModuleType:
    """containers/scripts/NAME.py, imported as a module (the scripts are not a package: the
    image copies them on their own)."""
    spec = importlib.util.spec_from_file_location(name, CONTAINERS / "scripts" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_dockerfile(path: Path = DOCKERFILE) -> list[Instruction]:
    instructions: list[Instruction] = []
    stage = 0
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = pending + line
        pending = ""
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(keyword, args.strip(), stage))
    if pending:
        raise ValueError(f"{path}: the file ends inside a continued line: {pending!r}")
    return instructions


def key_values(args: str) -> dict[str, str]:
    """`ENV A=1 B="x y"` / `LABEL a="b"` arguments as a dict."""
    pairs: dict[str, str] = {}
    for word in shlex.split(args):
        name, sep, value = word.partition("=")
        if not sep:
            raise ValueError(f"expected NAME=VALUE, found {word!r} in {args!r}")
        pairs[name] = value
    return pairs


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


def dockerfile_env(instructions: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in final_stage(instructions):
        if instruction.keyword == "ENV":
            env |= key_values(instruction.args)
    return env


def dockerfile_labels(instructions: list[Instruction]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for instruction in final_stage(instructions):
        if instruction.keyword == "LABEL":
            labels |= key_values(instruction.args)
    return labels


def dockerfile_json(instructions: list[Instruction], keyword: str) -> list[str]:
    found = [i for i in final_stage(instructions) if i.keyword == keyword]
    if len(found) != 1:
        raise ValueError(f"expected one {keyword} in the final stage, found {len(found)}")
    value = json.loads(found[0].args)
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ValueError(f"{keyword} is not a JSON list of strings: {found[0].args}")
    return value


def global_args(instructions: list[Instruction]) -> dict[str, str]:
    """The ARG defaults declared before the first FROM."""
    defaults: dict[str, str] = {}
    for instruction in instructions:
        if instruction.stage == 0 and instruction.keyword == "ARG":
            name, _, value = instruction.args.partition("=")
            defaults[name] = value
    return defaults


@dataclass(frozen=True)
class Definition:
    """An Apptainer .def file: header and the sections ddpimg's tests look at."""

    bootstrap: str
    from_: str
    environment: dict[str, str]
    labels: dict[str, str]
    runscript: str
    test_lines: tuple[str, ...]
    post: tuple[str, ...]
    files: tuple[tuple[str, str], ...]
    arguments: dict[str, str]  # %arguments: the build arguments' defaults

    def resolve(self, text: str) -> str:
        """``text`` with each ``{{ NAME }}`` replaced by the argument's default, as
        `apptainer build` without --build-arg does."""

        def default(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in self.arguments:
                raise ValueError(f"{{{{ {name} }}}} has no default in %arguments")
            return self.arguments[name]

        return re.sub(r"\{\{\s*(\w+)\s*\}\}", default, text)


def read_arguments(text: str) -> dict[str, str]:
    """The NAME=VALUE lines of a definition's %arguments section (spython skips it)."""
    arguments: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if line.startswith("%"):
            inside = line.split()[0] == "%arguments"
            continue
        name, sep, value = line.strip().partition("=")
        if inside and sep and not line.lstrip().startswith("#"):
            arguments[name] = value
    return arguments


def read_definition(path: Path) -> Definition:
    # Only the .def tests need spython (requirements/dev.txt); the Dockerfile readers do not.
    from spython.main.parse.parsers import SingularityParser  # type: ignore[import-untyped]

    recipe = SingularityParser(str(path)).recipe["spython-base"]
    header: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("%"):
            break
        name, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            header[name.strip().lower()] = value.strip()
    environment = {}
    for line in recipe.environ:
        name, _, value = line.removeprefix("export ").partition("=")
        environment[name] = value
    labels = {}
    for line in recipe.labels:
        name, _, value = line.partition(" ")
        labels[name] = value
    # spython folds %test into %post as lines writing /tests.sh.
    test_lines = tuple(line for line in recipe.install if "/tests.sh" in line)
    post = tuple(line for line in recipe.install if "/tests.sh" not in line)
    files = []
    for entry in recipe.files:  # "SOURCE DESTINATION" strings
        source, _, destination = str(entry).partition(" ")
        files.append((source, destination.strip()))
    return Definition(
        bootstrap=header.get("bootstrap", ""),
        from_=header.get("from", ""),
        environment=environment,
        labels=labels,
        runscript=recipe.cmd or "",
        test_lines=test_lines,
        post=post,
        files=tuple(files),
        arguments=read_arguments(path.read_text(encoding="utf-8")),
    )
