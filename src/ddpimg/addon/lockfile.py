"""An add-on's lock, ``NAME.lock``: every package the add-on adds, pinned, with the sha256 of
the file it was built from, headed by the identity of the package set it was made for. It is
the file a user commits: ``ddpimg addon build --lock NAME.lock`` builds exactly it again,
without resolving anything. Its entries are pip's hash-checking requirements format::

    # ddpimg add-on lock, schema 1: rebuild exactly this add-on, in an image of the same
    # package set, with: ddpimg addon build --lock timm.lock
    # name: timm
    # package-set: 3f2a9c1b0d4e...   (64 hex digits)
    # interpreter: python 3.11, cpython-311, linux-x86_64
    # image: image ddpimg cpu, lock cpu f7a6ac416372
    # requirement: timm
    einops==0.8.2 \\
        --hash=sha256:...
        # einops-0.8.2-py3-none-any.whl

A lock may come from someone else: it is read within bounds (size, entries), every line
must be one of the above, and what reaches pip is rewritten from the parsed entries, never
the file itself.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ddpimg.addon.errors import AddonError
from ddpimg.addon.packageset import PackageSet, image_words
from ddpimg.addon.sitepath import canonical_name, valid_name
from ddpimg.errors import printable
from ddpimg.untrusted import BadInput, read_text

SCHEMA = 1
MAX_LOCK_BYTES = 1 << 20
MAX_ENTRIES = 5000
SUFFIX = ".lock"
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_ENTRY = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)\Z")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})\Z")
_FILE = re.compile(r"# ([A-Za-z0-9][A-Za-z0-9._+!-]*)\Z")


@dataclass(frozen=True)
class Locked:
    """One package of an add-on: its name and version, and the file it comes from."""

    name: str
    version: str
    sha256: str
    filename: str

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")


@dataclass(frozen=True)
class Lock:
    """A parsed or newly made lock."""

    name: str
    package_set: str
    interpreter: str
    image: str
    requirements: tuple[str, ...]
    packages: tuple[Locked, ...]

    def text(self) -> str:
        """The file's content (deterministic: entries sorted by name)."""
        lines = [
            f"# ddpimg add-on lock, schema {SCHEMA}: rebuild exactly this add-on, in an image "
            "of the same",
            f"# package set, with: ddpimg addon build --lock {self.name}{SUFFIX}",
            f"# name: {self.name}",
            f"# package-set: {self.package_set}",
            f"# interpreter: {self.interpreter}",
        ]
        if self.image:
            lines.append(f"# image: {self.image}")
        lines += [f"# requirement: {text}" for text in self.requirements]
        for item in sorted(self.packages, key=lambda entry: entry.name):
            lines += [
                f"{item.pin} \\",
                f"    --hash=sha256:{item.sha256}",
                f"    # {item.filename}",
            ]
        return "\n".join(lines) + "\n"

    def hashed_requirements(self) -> str:
        """The entries as pip's ``--require-hashes`` input (written from the parsed data)."""
        return "".join(
            f"{item.pin} --hash=sha256:{item.sha256}\n"
            for item in sorted(self.packages, key=lambda entry: entry.name)
        )


def interpreter_words(image: PackageSet) -> str:
    facts = image.interpreter
    return f"python {facts['python']}, {facts['implementation']}, {facts['platform']}"


def new_lock(
    name: str, image: PackageSet, requirements: Sequence[str], packages: Sequence[Locked]
) -> Lock:
    return Lock(
        name=name,
        package_set=image.identity,
        interpreter=interpreter_words(image),
        image=image_words(image.image) if image.image else "",
        requirements=tuple(requirements),
        packages=tuple(sorted(packages, key=lambda entry: entry.name)),
    )


def read_lock(path: Path) -> Lock:
    """The lock in ``path``; an AddonError naming the file and line for anything else."""
    try:
        text = read_text(path, MAX_LOCK_BYTES)
    except (OSError, BadInput) as err:
        why = err.strerror if isinstance(err, OSError) else str(err)
        raise AddonError(
            f"lock {printable(str(path))} cannot be read: {why}",
            hint="give the NAME.lock that ddpimg addon build wrote beside the add-on",
        ) from err
    return parse_lock(text, printable(str(path)))


def parse_lock(text: str, where: str) -> Lock:
    header: dict[str, str] = {}
    requirements: list[str] = []
    entries: list[Locked] = []
    pending: tuple[str, str] | None = None
    digest = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()

        def bad(why: str, line: str = line, number: int = number) -> AddonError:
            return AddonError(
                f"lock {where} line {number}: {why}: {printable(line[:200])}",
                hint="a lock is written by ddpimg addon build; build it again from the "
                "requirements rather than editing it",
            )

        if not line:
            continue
        if pending is None and not entries and line.startswith("# "):
            key, colon, value = line[2:].partition(": ")
            if colon and key == "requirement":
                requirements.append(value)
            elif colon and key in ("name", "package-set", "interpreter", "image"):
                header[key] = value
            continue
        if pending is not None and _HASH.match(line):
            digest = _HASH.match(line).group(1)  # type: ignore[union-attr]
            continue
        if pending is not None and digest and _FILE.match(line):
            name, version = pending
            entries.append(Locked(name, version, digest, line[2:]))
            pending, digest = None, ""
            continue
        if pending is not None:
            raise bad("expected the entry's --hash=sha256:... and # FILE lines")
        entry = _ENTRY.match(line.removesuffix("\\").strip())
        if entry is None:
            raise bad("not a NAME==VERSION entry")
        if len(entries) >= MAX_ENTRIES:
            raise bad(f"more than {MAX_ENTRIES} entries")
        pending = (canonical_name(entry.group(1)), entry.group(2))
    if pending is not None:
        raise AddonError(
            f"lock {where}: its last entry {pending[0]}=={pending[1]} has no hash and file",
            hint="the file is cut short: take it again from where it was committed",
        )
    name = header.get("name", "")
    identity = header.get("package-set", "")
    if not valid_name(name) or not _HEX64.match(identity):
        raise AddonError(
            f"lock {where}: its header lacks a valid '# name:' or '# package-set:' line "
            f"(found name {printable(name)!r}, package set {printable(identity[:70])!r})",
            hint="a lock is written by ddpimg addon build; build it again from the requirements",
        )
    names = [entry.name for entry in entries]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise AddonError(
            f"lock {where}: {', '.join(twice)} locked more than once",
            hint="build the lock again from the requirements",
        )
    return Lock(
        name=name,
        package_set=identity,
        interpreter=header.get("interpreter", ""),
        image=header.get("image", ""),
        requirements=tuple(requirements),
        packages=tuple(entries),
    )
