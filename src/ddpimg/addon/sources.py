"""The files an add-on is made from: which downloaded file is which package, their sha256,
and source distributions built into wheels.

A source distribution is unpacked here (within bounds, every member checked: no path out of
its directory, no link, no device) into a directory whose path does not change from one build
to the next, and built there by pip without build isolation: with the image's own setuptools
and, for a C/C++ extension, the image's torch and its headers, so that the extension is built
against the torch it will run with. Before that, two refusals that name the package:

- its build backend (``pyproject.toml``'s ``[build-system] requires``) is not in the image:
  no isolated build downloads one (it would bring packages the lock does not name);
- it has C, C++, CUDA or Cython sources and the image has no compiler (the cpu image).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
import tarfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ddpimg.addon.errors import AddonError
from ddpimg.addon.lockfile import Locked
from ddpimg.addon.packageset import PackageSet
from ddpimg.addon.sitepath import canonical_name
from ddpimg.errors import printable

MAX_MEMBERS = 100_000
MAX_UNPACKED_BYTES = 4 << 30
COMPILED_SOURCES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".pyx", ".f90")
COMPILERS = ("c++", "g++", "cc", "gcc", "clang")
# Build times and paths written into files are the same at every build.
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest a zip (wheel) can hold
_CHUNK = 1 << 20
_SDIST_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")
_SETUPTOOLS = ("setuptools",)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def name_version(filename: str) -> tuple[str, str] | None:
    """(canonical name, version) of a wheel's or source distribution's file name."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return (canonical_name(parts[0]), parts[1]) if len(parts) >= 5 else None
    for suffix in _SDIST_SUFFIXES:
        if filename.endswith(suffix):
            stem = filename[: -len(suffix)]
            name, dash, version = stem.rpartition("-")
            return (canonical_name(name), version) if dash and name else None
    return None


def match_files(
    directory: Path, wanted: Mapping[str, str], known: Mapping[str, str] | None = None
) -> list[Locked]:
    """The downloaded file of each ``wanted`` package ({name: version}), with its sha256;
    ``known``: the sha256 the index or the lock gave for a package, which must match."""
    files: dict[str, Path] = {}
    for path in sorted(directory.iterdir()):
        parsed = name_version(path.name)
        if parsed is None:
            continue
        name, version = parsed
        if wanted.get(name) == version or _same_version(wanted.get(name), version):
            files[name] = path
    missing = sorted(set(wanted) - set(files))
    if missing:
        raise AddonError(
            f"pip downloaded no file for {', '.join(f'{n}=={wanted[n]}' for n in missing)}",
            hint="check that your index serves these versions",
        )
    out: list[Locked] = []
    for name in sorted(wanted):
        path = files[name]
        digest = sha256_of(path)
        expected = (known or {}).get(name)
        if expected and expected != digest:
            raise AddonError(
                f"{path.name}: sha256 {digest}, not the {expected} expected",
                hint="the index serves another file than the one locked or announced; build "
                "again from the requirements if the change is wanted",
            )
        out.append(Locked(name, wanted[name], digest, path.name))
    return out


def _same_version(wanted: str | None, found: str) -> bool:
    """Whether a file name's version is ``wanted`` spelt otherwise (``1.0-post1`` for
    ``1.0.post1``: PEP 440 says which spellings are one version)."""
    from ddpimg.addon.specs import Version, is_valid_version

    if wanted is None or not (is_valid_version(wanted) and is_valid_version(found)):
        return False
    return bool(Version(wanted) == Version(found))


@dataclass(frozen=True)
class Toolchain:
    """What the environment can build with."""

    compiler: str | None  # the C/C++ compiler's path, or None

    @classmethod
    def find(cls) -> Toolchain:
        for name in COMPILERS:
            found = shutil.which(name)
            if found:
                return cls(found)
        return cls(None)


def unpack_sdist(archive: Path, dest: Path) -> Path:
    """Unpack ``archive`` into ``dest`` (created, must not exist) and return the project's
    directory (the archive's single top-level folder)."""
    dest.mkdir(parents=True)
    if archive.name.endswith(".zip"):
        _unpack_zip(archive, dest)
    else:
        _unpack_tar(archive, dest)
    tops = [path for path in dest.iterdir()]
    if len(tops) == 1 and tops[0].is_dir():
        return tops[0]
    return dest


def _member_path(dest: Path, name: str, archive: Path) -> Path:
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts:
        raise AddonError(
            f"{archive.name}: member {printable(name)} would land outside its directory",
            hint="this source distribution is malformed or hostile: do not use it",
        )
    return dest.joinpath(*parts)


def _unpack_tar(archive: Path, dest: Path) -> None:
    total = 0
    with tarfile.open(archive) as tar:
        for count, member in enumerate(tar, start=1):
            if count > MAX_MEMBERS:
                raise _too_big(archive, f"more than {MAX_MEMBERS:,} members")
            target = _member_path(dest, member.name, archive)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            if not member.isfile():
                continue  # links, devices: a build needs none
            total += member.size
            if total > MAX_UNPACKED_BYTES:
                raise _too_big(archive, f"more than {MAX_UNPACKED_BYTES >> 30} GiB unpacked")
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            if source is None:
                continue
            with source, target.open("wb") as out:
                shutil.copyfileobj(source, out, _CHUNK)
            os.chmod(target, 0o755 if member.mode & stat.S_IXUSR else 0o644)


def _unpack_zip(archive: Path, dest: Path) -> None:
    total = 0
    with zipfile.ZipFile(archive) as zipped:
        members = zipped.infolist()
        if len(members) > MAX_MEMBERS:
            raise _too_big(archive, f"more than {MAX_MEMBERS:,} members")
        for member in members:
            target = _member_path(dest, member.filename, archive)
            if member.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            total += member.file_size
            if total > MAX_UNPACKED_BYTES:
                raise _too_big(archive, f"more than {MAX_UNPACKED_BYTES >> 30} GiB unpacked")
            target.parent.mkdir(parents=True, exist_ok=True)
            with zipped.open(member) as source, target.open("wb") as out:
                shutil.copyfileobj(source, out, _CHUNK)


def _too_big(archive: Path, why: str) -> AddonError:
    return AddonError(
        f"{archive.name}: {why}",
        hint="an add-on is for packages of a reasonable size; use a wheel of it",
    )


def build_requires(project: Path) -> list[str]:
    """The names of what builds ``project``: pyproject.toml's ``[build-system] requires``,
    or setuptools (a setup.py project)."""
    from ddpimg.addon.specs import InvalidRequirement, Requirement

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    pyproject = project / "pyproject.toml"
    if not pyproject.is_file():
        return list(_SETUPTOOLS)
    try:
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return list(_SETUPTOOLS)
    system = document.get("build-system")
    requires = system.get("requires") if isinstance(system, dict) else None
    if not isinstance(requires, list):
        return list(_SETUPTOOLS)
    names = []
    for text in requires:
        try:
            requirement = Requirement(str(text))
        except InvalidRequirement:
            continue
        if requirement.marker is None or requirement.marker.evaluate():
            names.append(canonical_name(requirement.name))
    return names


def compiled_sources(project: Path, limit: int = 3) -> list[str]:
    """Up to ``limit`` C/C++/CUDA/Cython source files of ``project`` (relative paths)."""
    found: list[str] = []
    for parent, folders, files in os.walk(project):
        folders.sort()
        for name in sorted(files):
            if name.endswith(COMPILED_SOURCES):
                found.append(os.path.relpath(os.path.join(parent, name), project))
                if len(found) >= limit:
                    return found
    return found


def check_buildable(item: Locked, project: Path, image: PackageSet, toolchain: Toolchain) -> None:
    """Refuse, naming the package, what this environment cannot build."""
    missing = [name for name in build_requires(project) if image.version(name) is None]
    if missing:
        raise AddonError(
            f"{item.name} {item.version} comes as a source distribution ({item.filename}) built "
            f"by {', '.join(missing)}, which the image does not have",
            hint=f"give a wheel of it: pip wheel --no-deps {item.pin} -w wheels/ (anywhere "
            "with the same Python), then --find-links wheels/; an add-on is built with the "
            "image's own tools, never with ones downloaded for the build",
        )
    sources = compiled_sources(project)
    if sources and toolchain.compiler is None:
        more = ", ..." if len(sources) >= 3 else ""
        raise AddonError(
            f"{item.name} {item.version} is a source distribution with compiled code "
            f"({', '.join(printable(s) for s in sources)}{more}), and this image has no C/C++ "
            "compiler (the cpu image compiles nothing)",
            hint="build the add-on in the gpu image (it has g++ and torch's headers), or give "
            "a wheel of it built for this image's torch with --find-links DIR",
        )


def build_environment(build_dir: Path) -> dict[str, str]:
    """What a build sees besides the user's environment: a fixed time, and the build
    directory's path mapped away in what the compiler writes."""
    prefix_map = f"-ffile-prefix-map={build_dir}=."
    return {
        "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH,
        "PYTHONHASHSEED": "0",
        "CFLAGS": " ".join(filter(None, [os.environ.get("CFLAGS", ""), prefix_map])),
        "CXXFLAGS": " ".join(filter(None, [os.environ.get("CXXFLAGS", ""), prefix_map])),
    }
