"""A user's requirements file, read for an add-on, and checked against the image's packages
before pip sees it.

What it may hold: requirement specifiers (PEP 508: ``timm``, ``einops>=0.8``,
``hydra-core[extra]; python_version>='3.10'``), comments, ``\\`` continuations, ``-r FILE``
(relative to the including file) and ``--hash`` options (dropped: the add-on's lock records
the hashes of the files it used). Pip's other options (``--index-url``, ``-e``, ...) and
requirements by URL or path are refused with the way to say the same thing: the index is the
user's pip configuration, a local package comes through ``--find-links DIR``. The file is
someone's text: bounded in size, lines and include depth, every name printed escaped.

The check: a requirement on a package of the image must admit the image's version (``torch``,
``torch>=2.4`` do; ``torch==2.5.1``, ``numpy<2`` do not). Those that do not are all named at
once, before anything is resolved or installed; a package whose release pins another torch
is caught by the resolution under the image's constraints (``ddpimg.addon.resolve``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ddpimg.addon.errors import AddonError
from ddpimg.addon.packageset import PackageSet
from ddpimg.addon.specs import InvalidRequirement, Requirement, admits
from ddpimg.errors import printable
from ddpimg.untrusted import BadInput, read_text

MAX_FILE_BYTES = 1 << 20
MAX_REQUIREMENTS = 2000
MAX_INCLUDE_DEPTH = 8
_URL_SCHEMES = ("http://", "https://", "file:", "git+", "hg+", "svn+", "bzr+")
_ARCHIVES = (".whl", ".tar.gz", ".zip", ".tar.bz2", ".tgz")


@dataclass(frozen=True)
class UserRequirement:
    """One requirement and where it was written (``requirements.txt line 3``)."""

    where: str
    text: str
    requirement: Requirement

    @property
    def name(self) -> str:
        from ddpimg.addon.sitepath import canonical_name

        return canonical_name(self.requirement.name)

    def applies(self) -> bool:
        """Whether its environment marker holds for this interpreter (no marker: yes)."""
        marker = self.requirement.marker
        return marker is None or bool(marker.evaluate())


def read_requirements(path: Path) -> list[UserRequirement]:
    """The requirements of ``path`` and the files it includes, in order."""
    found: list[UserRequirement] = []
    _read(path, found, depth=0, seen=(), files=[])
    if not found:
        raise AddonError(
            f"{printable(str(path))}: no requirement in it",
            hint="one package a line, as pip takes them: timm, einops>=0.8",
        )
    return found


def included_files(path: Path) -> list[Path]:
    """``path`` and every file it includes (``-r``), as given."""
    files: list[Path] = []
    _read(path, [], depth=0, seen=(), files=files)
    return files


def _read(
    path: Path,
    found: list[UserRequirement],
    depth: int,
    seen: tuple[Path, ...],
    files: list[Path],
) -> None:
    files.append(path)
    real = Path(os.path.realpath(path))
    if real in seen:
        raise AddonError(
            f"{printable(str(path))} includes itself (-r), through "
            f"{' -> '.join(printable(p.name) for p in (*seen, real))}",
            hint="remove the -r line that closes the circle",
        )
    if depth > MAX_INCLUDE_DEPTH:
        raise AddonError(
            f"{printable(str(path))}: -r includes nested more than {MAX_INCLUDE_DEPTH} deep",
            hint="put the requirements in fewer files",
        )
    try:
        text = read_text(path, MAX_FILE_BYTES)
    except (OSError, BadInput) as err:
        why = err.strerror if isinstance(err, OSError) else str(err)
        raise AddonError(
            f"requirements file {printable(str(path))} cannot be read: {why}",
            hint="give a requirements file as pip takes it: -r requirements.txt",
        ) from err
    for number, line in _logical_lines(text):
        where = f"{printable(str(path))} line {number}"
        if line.startswith("-"):
            include = _include(line)
            if include is not None:
                _read(path.parent / include, found, depth + 1, (*seen, real), files)
                continue
            _refuse_option(line, where)
        _add(_drop_hashes(line), where, found)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each line, continuations joined, comments and blanks
    dropped (pip's rule: ``#`` at the start or after whitespace starts a comment)."""
    out: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw
        for i, char in enumerate(line):
            if char == "#" and (i == 0 or line[i - 1].isspace()):
                line = line[:i]
                break
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            out.append((start, whole))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def _include(line: str) -> str | None:
    for option in ("-r", "--requirement"):
        if line == option:
            return None
        for separator in (" ", "=", "\t"):
            if line.startswith(option + separator):
                target = line[len(option) + 1 :].strip()
                return target or None
    return None


def _refuse_option(line: str, where: str) -> None:
    option = line.split(maxsplit=1)[0].split("=", maxsplit=1)[0]
    if option in ("-e", "--editable"):
        hint = (
            "an add-on is a packed, locked file: build a wheel of the project (pip wheel "
            "--no-deps DIR -w wheels/), then --find-links wheels/ with its name here"
        )
    elif option in ("-c", "--constraint"):
        hint = "put the versions you need in the requirements themselves (einops==0.8.2)"
    else:
        hint = (
            "the index, mirror and proxy are your pip's own settings (pip config, PIP_* "
            "variables), which ddpimg addon build uses; a directory of wheels is --find-links "
            "DIR"
        )
    raise AddonError(f"{where}: {printable(option)}: not taken in an add-on's requirements", hint)


def _drop_hashes(line: str) -> str:
    return " ".join(word for word in line.split() if not word.startswith("--hash"))


def _add(line: str, where: str, found: list[UserRequirement]) -> None:
    if (
        line.startswith(_URL_SCHEMES)
        or line.startswith((".", "/", "~"))
        or line.endswith(_ARCHIVES)
    ):
        raise AddonError(
            f"{where}: {printable(line)}: a path or URL, not a requirement by name",
            hint="put the file (a wheel or source distribution) in a directory and give "
            "--find-links DIR, with the package's name here",
        )
    try:
        requirement = Requirement(line)
    except InvalidRequirement as err:
        raise AddonError(
            f"{where}: {printable(line)} is not a requirement ({err})",
            hint="write it as pip does: name, name==1.2, name>=1.0,<2, name[extra]",
        ) from None
    if requirement.url:
        raise AddonError(
            f"{where}: {printable(line)}: a requirement by URL",
            hint="put the file in a directory and give --find-links DIR, with the package's "
            "name here",
        )
    if len(found) >= MAX_REQUIREMENTS:
        raise AddonError(
            f"{where}: more than {MAX_REQUIREMENTS} requirements",
            hint="an add-on adds a few packages to the image; split it",
        )
    found.append(UserRequirement(where, line, requirement))


@dataclass(frozen=True)
class FromImage:
    """A requirement the image already satisfies: nothing is added for it."""

    requirement: UserRequirement
    version: str


def check_against_image(
    requirements: Sequence[UserRequirement], image: PackageSet
) -> list[FromImage]:
    """The requirements the image's packages satisfy; an AddonError naming every one that
    asks for another version of an image package."""
    satisfied: list[FromImage] = []
    conflicts: list[str] = []
    for item in requirements:
        if not item.applies():
            continue
        version = image.version(item.name)
        if version is None:
            continue
        if admits(item.requirement.specifier, version):
            satisfied.append(FromImage(item, version))
            continue
        conflicts.append(
            f"{item.where}: {printable(item.text)} would replace the image's {item.name} {version}"
        )
    if conflicts:
        raise conflict_error(conflicts)
    return satisfied


def conflict_error(conflicts: Sequence[str]) -> AddonError:
    """The refusal of requirements that would change the image's packages, each conflict
    naming the requirement and the image's package and version."""
    head = "an add-on never replaces, upgrades or shadows a package of the image, and this would"
    if len(conflicts) == 1:
        message = f"{conflicts[0]}: {head}"
    else:
        listed = "\n".join(f"  {i}. {text}" for i, text in enumerate(conflicts, start=1))
        message = (
            f"{len(conflicts)} requirements would change the image's packages ({head}):\n{listed}"
        )
    return AddonError(
        message,
        hint="drop the requirement (the image's version is used), or loosen it to admit the "
        "image's version; a package that needs another version of an image package needs an "
        "image built with that version",
    )
