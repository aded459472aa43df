"""The working tree a job needs, by content: what git would track (its files and the
untracked ones it does not ignore), or what ``--include`` names, each file as its sha256.

Where the command runs in the tree is kept (``subdir``), so ``train --script train.py``
started in ``repo/exp`` finds ``exp/train.py`` on the login node as it does here. Limits on
the count and total size are checked before anything is read or sent: a tree of data or
outputs left in by mistake is an error that names the limit and its flag. A symbolic link
is staged as the file it points to when that file is in the tree, and refused otherwise;
special files are refused.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ddpimg.errors import DdpimgError, printable

DEFAULT_MAX_MB = 100
DEFAULT_MAX_FILES = 20_000
GIT_TIMEOUT_S = 60.0
_CHUNK = 1 << 20


@dataclass(frozen=True)
class TreeFile:
    """One file to stage: its path in the tree (``/``-separated), content and mode;
    ``local``: where it is read from when that is not under the tree's root (an add-on)."""

    path: str
    digest: str
    size: int
    executable: bool
    local: str = ""

    @property
    def object_name(self) -> str:
        """Its name in the login node's store: the same content and mode, the same name."""
        return f"{self.digest[:2]}/{self.digest}" + ("-x" if self.executable else "")


@dataclass(frozen=True)
class Tree:
    """The files to stage, relative to ``root``; the command runs in ``subdir`` of it."""

    root: Path
    subdir: str
    files: tuple[TreeFile, ...]
    source: str  # "git", "--include" or "nothing"

    @property
    def size(self) -> int:
        return sum(item.size for item in self.files)

    def local_path(self, item: TreeFile) -> Path:
        """Where ``item``'s content is read from here."""
        return Path(item.local) if item.local else self.root / item.path

    def has(self, path: str) -> bool:
        return any(item.path == path for item in self.files)


@dataclass(frozen=True)
class Limits:
    max_bytes: int = DEFAULT_MAX_MB << 20
    max_files: int = DEFAULT_MAX_FILES


def collect_tree(
    cwd: Path, includes: Sequence[str], limits: Limits, outputs: Path | None = None
) -> Tree:
    """The tree to stage from ``cwd``: ``includes`` (paths under ``cwd``) when given, else
    what git would track in the work tree holding ``cwd``, else nothing; either way without
    what is under ``outputs`` (the local runs root, where fetched runs land: outputs, not
    code)."""
    cwd = cwd.resolve()
    if includes:
        paths = _outside(outputs, cwd, cwd, list(_included(cwd, includes)))
        return _hashed(cwd, ".", paths, limits, "--include")
    top = _git_top(cwd)
    if top is None:
        return Tree(cwd, ".", (), "nothing")
    subdir = cwd.relative_to(top).as_posix()
    files = _outside(outputs, cwd, top, _git_files(top))
    return _hashed(top, subdir, files, limits, "git")


def _outside(outputs: Path | None, cwd: Path, top: Path, names: list[str]) -> list[str]:
    """``names`` (relative to ``top``) but those under ``outputs`` (relative to ``cwd``)."""
    if outputs is None:
        return names
    skipped = (cwd / outputs).resolve()
    if skipped != top and top not in skipped.parents:
        return names
    prefix = skipped.relative_to(top).as_posix() + "/"
    return [name for name in names if not name.startswith(prefix)]


def describe_size(size: int) -> str:
    """``1.2 MB``, ``340 B``: sizes as the messages show them (powers of 1000)."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _git_top(cwd: Path) -> Path | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(cwd), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    return Path(proc.stdout.strip()).resolve()


def _git_files(top: Path) -> list[str]:
    """Tracked files and untracked ones git does not ignore (its index as it is now)."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(top), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard"],
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as err:
        raise DdpimgError(
            f"git ls-files in {top} took more than {GIT_TIMEOUT_S:g} s",
            hint="stage what the job needs with --include PATH",
        ) from err
    if proc.returncode != 0:
        raise DdpimgError(
            f"git ls-files in {top} failed: "
            f"{printable(proc.stderr.decode(errors='replace').strip())}",
            hint="stage what the job needs with --include PATH",
        )
    names = [os.fsdecode(name) for name in proc.stdout.split(b"\0") if name]
    # A tracked file deleted from the work tree, or a submodule: nothing to stage.
    return sorted(
        {name for name in names if os.path.lexists(top / name) and not (top / name).is_dir()}
    )


def _included(cwd: Path, includes: Sequence[str]) -> Iterable[str]:
    """The files under each ``--include`` path, relative to ``cwd``; a path outside it, or
    missing, is an error."""
    seen: set[str] = set()
    for given in includes:
        # Normalised, not resolved: a link named here is judged by _regular, as in a walk.
        path = Path(os.path.normpath(cwd / given))
        if path != cwd and cwd not in path.parents:
            raise DdpimgError(
                f"--include {printable(given)}: not under the directory submit runs in ({cwd})",
                hint="run ddpimg submit from the directory that holds what the job needs",
            )
        if not os.path.lexists(path):
            raise DdpimgError(
                f"--include {printable(given)}: no such file or directory", hint="check the path"
            )
        found = _walk(path) if path.is_dir() and not path.is_symlink() else [path]
        for item in found:
            name = item.relative_to(cwd).as_posix()
            if name not in seen:
                seen.add(name)
                yield name


def _walk(folder: Path) -> list[Path]:
    """Files under ``folder``, without entering linked directories."""
    found: list[Path] = []
    for parent, folders, files in os.walk(folder, followlinks=False):
        folders[:] = [name for name in folders if not (Path(parent) / name).is_symlink()]
        found += [Path(parent, name) for name in files]
    return sorted(found)


def _hashed(root: Path, subdir: str, paths: Sequence[str], limits: Limits, source: str) -> Tree:
    if len(paths) > limits.max_files:
        raise DdpimgError(
            f"the tree to stage ({root}, {source}) holds {len(paths):,} files, more than "
            f"--max-stage-files {limits.max_files:,}",
            hint="leave data and outputs out of it (.gitignore, or --include only what the job "
            "needs), or raise --max-stage-files",
        )
    sized = [(path, _regular(root, path)) for path in paths]
    total = sum(info.st_size for _, info in sized)
    if total > limits.max_bytes:
        largest = sorted(sized, key=lambda pair: -pair[1].st_size)[:3]
        named = ", ".join(
            f"{printable(path)} ({describe_size(info.st_size)})" for path, info in largest
        )
        raise DdpimgError(
            f"the tree to stage ({root}, {source}) is {describe_size(total)} in "
            f"{len(paths):,} files, more than --max-stage-size {limits.max_bytes >> 20} MB "
            f"(largest: {named})",
            hint="leave data and outputs out of it (.gitignore, or --include only what the job "
            "needs; data belongs on the cluster's file system), or raise --max-stage-size",
        )
    files = tuple(
        TreeFile(path, _sha256(root / path), info.st_size, bool(info.st_mode & stat.S_IXUSR))
        for path, info in sized
    )
    return Tree(root, subdir, files, source)


def _regular(root: Path, path: str) -> os.stat_result:
    """The status of the file staged for ``path``: itself, or the file in the tree its link
    points to; an error for anything else."""
    if PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts:
        raise DdpimgError(f"{printable(path)}: not a path inside the tree", hint="check the tree")
    full = root / path
    info = full.lstat()
    if stat.S_ISLNK(info.st_mode):
        target = full.resolve()
        if root not in target.parents:
            raise DdpimgError(
                f"{printable(path)} is a symbolic link out of the tree "
                f"(to {printable(str(target))})",
                hint="stage the file itself, or leave the link out (.gitignore, --include)",
            )
        info = target.stat()
    if not stat.S_ISREG(info.st_mode):
        raise DdpimgError(
            f"{printable(path)} is not a regular file",
            hint="leave it out of the tree (.gitignore, or --include only what the job needs)",
        )
    return info


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
