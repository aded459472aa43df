"""pip, run by the environment's own Python, for each step of an add-on's build.

pip reaches packages the way the user's pip does: its configuration files and ``PIP_*``
variables (index, mirror, proxy, certificates) are read as usual, plus ``--find-links DIR``
and ``--no-index`` from the command line. Only what would break the build is overridden
(``PIP_USER=0``: no user install), and the install into the add-on's tree runs
``--isolated`` from the files already checked here.

Resolution (``resolve``) is ``pip install --dry-run --report`` in the environment itself,
under a constraints file that pins every package of the image to its installed version: pip
takes the installed torch for ``timm``'s ``torch`` requirement and downloads nothing for it,
and a package that needs another torch makes the resolution impossible, which is reported
as the refusal it is (``resolution_error``), naming the requirement and the image's package.
A source distribution's metadata is prepared with the image's own build tools, as its build
will be (``--no-build-isolation``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpimg.addon.errors import AddonError
from ddpimg.addon.packageset import PackageSet
from ddpimg.addon.requirements import UserRequirement
from ddpimg.addon.sitepath import ROOT_VARIABLE, canonical_name
from ddpimg.errors import printable
from ddpimg.untrusted import BadInput, read_json

# pip reads metadata and files from an index: minutes on a slow mirror, never forever.
RESOLVE_TIMEOUT_S = 1800.0
DOWNLOAD_TIMEOUT_S = 3600.0
BUILD_TIMEOUT_S = 7200.0
INSTALL_TIMEOUT_S = 1800.0
REPORT_LIMIT = 64 << 20
TAIL_LINES = 25
_DEPENDS = re.compile(r"^\s*(\S+) (\S+) depends on (\S.*)$")
_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")


@dataclass(frozen=True)
class Pip:
    """How pip runs here: the interpreter, the options every index-reading step gets, and
    the environment (the user's own, with ``PIP_USER`` off)."""

    python: str
    index_options: tuple[str, ...]
    env: Mapping[str, str]

    @classmethod
    def for_build(cls, find_links: Sequence[str], no_index: bool) -> Pip:
        options: list[str] = []
        for directory in find_links:
            options += ["--find-links", directory]
        if no_index:
            options.append("--no-index")
        # No mounted add-on on pip's path (a build in an image that has some): what pip
        # takes as installed is the image's own packages, nothing else.
        no_addons = os.path.join(os.devnull, "addons")
        env = dict(os.environ) | {"PIP_USER": "0", "PIP_NO_INPUT": "1", ROOT_VARIABLE: no_addons}
        return cls(sys.executable, tuple(options), env)

    def run(
        self,
        args: Sequence[str],
        what: str,
        timeout: float,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        argv = [self.python, "-m", "pip", *args]
        try:
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=dict(self.env) | dict(env or {}),
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise AddonError(
                f"{what}: pip did not finish within {timeout:g} s",
                hint="check that your package index answers (pip config list shows it)",
            ) from err

    def common(self) -> list[str]:
        return ["--disable-pip-version-check", "--no-input", "--progress-bar", "off"]


@dataclass(frozen=True)
class Resolved:
    """A package pip would add: name (canonical), version, and the file's sha256 when the
    index said it."""

    name: str
    version: str
    url: str
    sha256: str | None


def tail(text: str, lines: int = TAIL_LINES) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return "\n".join(f"  | {printable(line)}" for line in kept)


def resolve(
    pip: Pip,
    requirements: Path,
    given: Sequence[UserRequirement],
    image: PackageSet,
    work: Path,
) -> list[Resolved]:
    """What pip adds to the image for ``requirements`` (``given``, written out) under the
    image's constraints."""
    constraints = work / "image-constraints.txt"
    constraints.write_text(image.constraints(), encoding="utf-8")
    report = work / "resolution.json"
    args = [
        "install", "--dry-run", "--report", str(report), "--no-build-isolation",
        *pip.common(),
        *pip.index_options, "-r", str(requirements), "-c", str(constraints),
    ]  # fmt: skip
    # A Debian or Ubuntu system Python refuses any install, a dry run included (PEP 668).
    proc = pip.run(args, "resolving the requirements", RESOLVE_TIMEOUT_S,
                   env={"PIP_BREAK_SYSTEM_PACKAGES": "1"})  # fmt: skip
    if proc.returncode != 0:
        # Without --quiet: pip says which package depends on what at the INFO level.
        raise resolution_error(proc.stdout + proc.stderr, image, given)
    try:
        document = read_json(report, REPORT_LIMIT)
    except (OSError, BadInput) as err:
        raise AddonError(
            f"pip's resolution report {report} cannot be read: {err}",
            hint="a pip of version 22.2 or later writes it (--report); upgrade the image's pip",
        ) from err
    return parse_report(document, image)


def parse_report(document: Any, image: PackageSet) -> list[Resolved]:
    """The packages to add from pip's installation report; an AddonError for one that
    would replace an image package (the constraints forbid it: a guard, not the check)."""
    items = document.get("install") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise AddonError(
            "pip's resolution report has no 'install' list",
            hint="run with a pip of version 22.2 or later",
        )
    found: list[Resolved] = []
    for item in items:
        meta = item.get("metadata", {}) if isinstance(item, dict) else {}
        info = item.get("download_info", {}) if isinstance(item, dict) else {}
        name = canonical_name(str(meta.get("name", "")))
        version = str(meta.get("version", ""))
        if not name or not version:
            raise AddonError(
                "pip's resolution report names a package without a name or version",
                hint="run with a pip of version 22.2 or later",
            )
        installed = image.version(name)
        if installed is not None:
            raise AddonError(
                f"resolving would install {name} {version} over the image's {name} {installed}",
                hint="an add-on never replaces a package of the image; drop what needs it",
            )
        archive = info.get("archive_info", {}) if isinstance(info, dict) else {}
        hashes = archive.get("hashes", {}) if isinstance(archive, dict) else {}
        sha = hashes.get("sha256") if isinstance(hashes, dict) else None
        url = str(info.get("url", "")) if isinstance(info, dict) else ""
        found.append(Resolved(name, version, url, sha if isinstance(sha, str) else None))
    return sorted(found, key=lambda item: item.name)


def resolution_error(
    output: str, image: PackageSet, given: Sequence[UserRequirement]
) -> AddonError:
    """pip's failed resolution as the user's error: a dependency on another version of an
    image package names the requirement it came from, the dependency and the image's
    version; a package the index lacks is named with where pip looked."""
    direct = {item.name: item for item in given}
    conflicts: list[str] = []
    inconsistent: list[str] = []
    for line in output.splitlines():
        found = _DEPENDS.match(line)
        if found is None:
            continue
        package, version, dependency = found.groups()
        dependency = dependency.strip()
        dep_name = re.split(r"[\s\[<>=!~;(]", dependency, maxsplit=1)[0]
        installed = image.version(dep_name)
        if installed is None:
            continue
        if image.version(package) == version:
            # Both sides are the image's: its own packages disagree, whatever is asked.
            inconsistent.append(
                f"{package} {version} requires {dependency}, but the {canonical_name(dep_name)} "
                f"found first is {installed}"
            )
            continue
        mine = direct.get(canonical_name(package))
        source = (
            f"{mine.where}: {mine.text}: " if mine is not None else "(needed by your requirements) "
        )
        conflicts.append(
            f"{source}{package} {version} requires {dependency}, but the image has "
            f"{canonical_name(dep_name)} {installed}"
        )
    if inconsistent:
        listed = "\n".join(f"  - {printable(text)}" for text in sorted(set(inconsistent)))
        return AddonError(
            "the image's own packages disagree, so nothing can be resolved against them (pip "
            f"check says the same):\n{listed}",
            hint="fix the image's environment first; in a venv made with --system-site-packages "
            "over a site's image, the venv's own setuptools or pip can hide the image's newer "
            "ones (DIR/bin/pip uninstall setuptools)",
        )
    if conflicts:
        listed = "\n".join(f"  - {printable(text)}" for text in sorted(set(conflicts)))
        return AddonError(
            "the requirements cannot be met without changing the image's packages (an add-on "
            f"never replaces, upgrades or shadows them):\n{listed}",
            hint="drop the package that requires another version (or pin an older release of "
            "it that accepts the image's), or use an image built with that version",
        )
    backend = _NO_MODULE.search(output)
    if backend is not None and "metadata" in output:
        return AddonError(
            f"a source distribution among the requirements is built by "
            f"{printable(backend.group(1))}, which the image does not have",
            hint="give a wheel of it (pip wheel --no-deps NAME==VERSION -w wheels/ anywhere with "
            "the same Python, then --find-links wheels/); an add-on is built with the image's "
            "own tools, never with ones downloaded for the build",
        )
    missing = _NO_MATCH.search(output)
    if missing is not None:
        return AddonError(
            f"pip found no distribution of {printable(missing.group(1))} for this image "
            "(Python and platform) where it looked",
            hint="check the name and version; inside a container pip finds nothing without "
            "your pip configuration: build from the host with --image IMAGE (it passes your "
            "pip settings), pass PIP_INDEX_URL / PIP_CERT, or give --find-links DIR "
            "--no-index",
        )
    return AddonError(
        f"pip could not resolve the requirements against the image's packages:\n{tail(output)}",
        hint="fix what pip says above; the image's packages are fixed, the add-on's adapt",
    )


def download(pip: Pip, pins: Path, dest: Path, hashed: bool) -> None:
    """The files of ``pins`` (``name==version``, with ``--hash`` when ``hashed``) into
    ``dest``, without their dependencies (the pins are the whole set)."""
    # pip prepares a source distribution's metadata even here: with the image's tools.
    args = ["download", "--quiet", "--no-deps", "--no-build-isolation", *pip.common(),
            *pip.index_options,
            "--dest", str(dest), "-r", str(pins)]  # fmt: skip
    if hashed:
        args.append("--require-hashes")
    proc = pip.run(args, "downloading the packages", DOWNLOAD_TIMEOUT_S)
    if proc.returncode != 0:
        raise AddonError(
            f"pip could not download the locked packages:\n{tail(proc.stderr)}",
            hint="a file whose hash differs from the lock's is refused: the index must serve "
            "the same files as when the lock was made (or build again from the requirements)",
        )


def build_wheel(pip: Pip, source: Path, dest: Path, env: Mapping[str, str]) -> str:
    """Build ``source`` (an unpacked source distribution) into a wheel in ``dest`` with the
    environment's own build tools and packages (no build isolation: an extension is
    compiled against the image's torch). Returns pip's output; raises on failure."""
    args = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", *pip.common(),
            "--wheel-dir", str(dest), str(source)]  # fmt: skip
    proc = pip.run(args, f"building {source.name}", BUILD_TIMEOUT_S, env=env)
    if proc.returncode != 0:
        raise BuildFailed(proc.stdout + proc.stderr)
    return proc.stdout


class BuildFailed(Exception):
    """pip wheel failed; the output is the exception's text."""


def install(pip: Pip, wheels: Path, pins: Path, target: Path) -> None:
    """Install exactly ``pins`` from the wheels in ``wheels`` into ``target`` (a
    site-packages directory of its own), uncompiled; nothing from an index."""
    args = ["install", "--isolated", "--quiet", "--no-deps", "--no-index", "--no-compile",
            *pip.common(), "--find-links", str(wheels), "--target", str(target),
            "-r", str(pins)]  # fmt: skip
    proc = pip.run(args, "installing the packages", INSTALL_TIMEOUT_S)
    if proc.returncode != 0:
        raise AddonError(
            f"pip could not install the add-on's packages into its tree:\n{tail(proc.stderr)}",
            hint="this is a bug of ddpimg addon build if the files were downloaded and built: "
            "report it with the output",
        )
