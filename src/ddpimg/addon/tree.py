"""The add-on's tree, between pip's install and the squashfs: console scripts moved out of
site-packages, the check that nothing in it is hidden by the image, byte-compilation, and
the permissions every reader needs.

Byte-compiled once, here, with the image's Python: hash-checked ``.pyc`` files (PEP 552), so
they hold no time stamp and stay valid on a read-only mount (a time-stamped ``.pyc`` would be
rewritten on first import into a writable tree, or recompiled at every import from a
read-only one). One process, files in sorted order, ``PYTHONHASHSEED=0`` and the mounted
path as the file names' prefix: the same tree compiles to the same bytes every time (a set
literal's order follows the string hash; marshal's references follow what the process
compiled before).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ddpimg.addon.errors import AddonError
from ddpimg.addon.metadata import BIN_DIR
from ddpimg.addon.sitepath import ROOT, SITE_DIR
from ddpimg.errors import printable

COMPILE_TIMEOUT_S = 1800.0
_SKIP = ("__pycache__", BIN_DIR)
_METADATA_SUFFIXES = (".dist-info", ".egg-info", ".data", ".pth")


def move_scripts(tree: Path) -> None:
    """pip ``--target`` puts console scripts into TARGET/bin: out of site-packages with them
    (a ``bin`` there would be importable as a namespace package)."""
    scripts = tree / SITE_DIR / BIN_DIR
    if scripts.is_dir():
        shutil.move(str(scripts), str(tree / BIN_DIR))


def top_level(directory: str) -> dict[str, bool]:
    """The importable top-level names in a site directory, each with whether it is a regular
    package or module (True) rather than a namespace package's portion (False)."""
    names: dict[str, bool] = {}
    try:
        entries = os.listdir(directory)
    except OSError:
        return names
    for entry in entries:
        if entry.startswith(".") or entry in _SKIP or entry.endswith(_METADATA_SUFFIXES):
            continue
        path = os.path.join(directory, entry)
        if os.path.isdir(path):
            if entry.isidentifier():
                names[entry] = os.path.exists(os.path.join(path, "__init__.py"))
        elif entry.endswith((".py", ".so", ".pyd")):
            module = entry.split(".", 1)[0]
            if module.isidentifier():
                names[module] = True
    return names


def check_shadows(site: Path, image_dirs: Sequence[str]) -> None:
    """Refuse a top-level module of the add-on that the image already has: Python would
    import the image's, and the add-on's package would break (two namespace packages'
    portions may share a name: they merge)."""
    ours = top_level(str(site))
    clashes: list[tuple[str, str]] = []
    for directory in image_dirs:
        theirs = top_level(directory)
        clashes += [
            (name, directory)
            for name, regular in sorted(ours.items())
            if name in theirs and (regular or theirs[name])
        ]
    if clashes:
        owners = _owners(site)
        named = "; ".join(
            f"'{name}' of {owners.get(name, '?')} (the image has it in {directory})"
            for name, directory in clashes
        )
        raise AddonError(
            "the add-on would install top-level modules that the image already has, which "
            f"Python would take from the image: {printable(named)}",
            hint="drop the package that installs them: its module name collides with a "
            "package of the image",
        )


def _owners(site: Path) -> dict[str, str]:
    """{top-level name: distribution} from the add-on's RECORD files."""
    owners: dict[str, str] = {}
    for record in sorted(site.glob("*.dist-info/RECORD")):
        distribution = record.parent.name.rsplit("-", 1)[0]
        for line in record.read_text(encoding="utf-8", errors="replace").splitlines():
            first = line.split(",", 1)[0].split("/", 1)[0]
            owners.setdefault(first.split(".", 1)[0], distribution)
    return owners


def compile_tree(site: Path, name: str) -> int:
    """Byte-compile ``site`` (hash-checked, named by its mounted path); the count of .pyc."""
    mounted = f"{ROOT}/{name}/{SITE_DIR}"
    argv = [sys.executable, "-m", "compileall", "-q", "--invalidation-mode", "checked-hash",
            "-d", mounted, str(site)]  # fmt: skip
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PYTHON") or key == "PYTHONIOENCODING"
    } | {"PYTHONHASHSEED": "0"}
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, env=env, check=False
        )
    except subprocess.TimeoutExpired as err:
        raise AddonError(
            f"byte-compiling the add-on took more than {COMPILE_TIMEOUT_S:g} s",
            hint="an add-on is for a few packages; split it",
        ) from err
    # Status 1: a file that is not Python 3 (a template, a test of Python 2), which pip's own
    # install skips the same way; anything else is a failure.
    if proc.returncode not in (0, 1):
        raise AddonError(
            f"byte-compiling the add-on failed (status {proc.returncode}): "
            f"{printable(proc.stderr.strip()[-500:])}",
            hint="report it with the output",
        )
    return sum(1 for _ in site.rglob("*.pyc"))


def normalise(tree: Path) -> tuple[int, int]:
    """Folders 0755, files 0644 (0755 when executable), whatever the umask was: every user
    of the mounted add-on reads it. Returns (files, bytes)."""
    files = size = 0
    for parent, folders, names in os.walk(tree):
        os.chmod(parent, 0o755)
        for folder in folders:
            path = os.path.join(parent, folder)
            if os.path.islink(path):
                raise AddonError(
                    f"{printable(path)} is a link to a folder",
                    hint="report the package that installed it",
                )
        for entry in names:
            path = os.path.join(parent, entry)
            status = os.lstat(path)
            if os.path.islink(path):
                continue
            os.chmod(path, 0o755 if status.st_mode & 0o111 else 0o644)
            files += 1
            size += status.st_size
    return files, size
