"""Durable file writes: a reader (or a node that crashes mid-write) sees either the old file
or the new one, never part of it. Used by the run outputs and the checkpoints alike.

Writes never go through a link someone else left in a folder (docs/security.md): a file is
replaced by renaming a new one over its name (a link there is replaced, its target left
alone), a temporary file is created under a fresh name that must not exist yet, and a file
written in place (metrics.jsonl) is opened without following a link. An output a command
was given (``-o FILE``) replaces an existing file only with ``--force`` (``check_new``).
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from ddpimg.errors import DdpimgError, printable
from ddpimg.untrusted import inside

# A new file's permissions before the umask: what open() gives (not mkstemp's 0600, which
# would hide a run's manifest from the group that shares the project folder).
_NEW_FILE_MODE = 0o666


def fsync_path(path: Path) -> None:
    """fsync a file or a folder (a rename is durable only once its folder is synced)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_tree(directory: Path) -> None:
    """fsync every file and folder under ``directory`` (folders after their content), so
    that what this process wrote there is on disk before anything that vouches for it."""
    for parent, folders, files in os.walk(directory, topdown=False):
        for name in files:
            fsync_path(Path(parent, name))
        for name in folders:
            fsync_path(Path(parent, name))
    fsync_path(directory)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a temporary file beside it (a fresh name, created
    exclusively, so that no link planted under a predictable name is followed), fsync,
    rename (over a link, the link is replaced), fsync of the folder."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(temporary, flags, _NEW_FILE_MODE)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)  # a full disk must not also fill up with leftovers
        raise
    fsync_path(path.parent)


def write_text_atomic(path: Path, text: str) -> None:
    """``write_bytes_atomic`` of ``text`` as UTF-8."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, data: Mapping[str, Any], indent: int = 2) -> None:
    """``write_text_atomic`` of ``data`` as sorted, indented JSON."""
    write_text_atomic(path, json.dumps(data, indent=indent, sort_keys=True) + "\n")


def check_new(path: Path, *, force: bool, flag: str) -> None:
    """Refuse to replace what is at ``path`` (given as ``flag PATH``) unless ``force``: an
    existing file or link is named, nothing is written. A folder is never replaced. Then
    ``write_bytes_atomic`` replaces the name itself: a link there is replaced, never written
    through."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return
    shown = printable(str(path))
    if stat.S_ISDIR(status.st_mode):
        raise DdpimgError(
            f"{flag} {shown}: a directory is there; nothing was written",
            hint=f"give {flag} the name of a file",
        )
    if force:
        return
    what = "a file"
    if stat.S_ISLNK(status.st_mode):
        what = f"a link to {printable(os.readlink(path))}"
    raise DdpimgError(
        f"{flag} {shown}: {what} is there already; nothing was written",
        hint="give another name, or --force to replace it",
    )


def check_no_link_out(root: Path, names: Iterable[str]) -> None:
    """A DdpimgError naming the first of ``root``'s entries ``names`` (the folders and files
    a run writes into) that is a link to somewhere outside ``root``: a run directory handed
    over with ``checkpoints -> ~/elsewhere`` would have ddpimg write, and with ``--resume
    none`` remove, files there."""
    for name in names:
        path = root / name
        if os.path.islink(path) and not inside(path, root):
            raise DdpimgError(
                f"{printable(str(path))} is a link to {printable(os.path.realpath(path))}, outside "
                f"{printable(str(root))}: ddpimg writes a run's files inside its directory only",
                hint="remove the link, or give --out on the file system where the files should go",
            )


def open_own(path: Path, *, append: bool) -> TextIO:
    """``path`` opened for writing text, appended to or emptied, only if it is a regular
    file or absent: a link (which could lead out of the run directory), a FIFO or a device
    is a DdpimgError naming it. For the files a run keeps writing (metrics.jsonl)."""
    if os.path.islink(path):
        raise _not_own(path, f"a link to {printable(os.readlink(path))}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    flags |= os.O_APPEND if append else os.O_TRUNC
    try:
        descriptor = os.open(path, flags, _NEW_FILE_MODE)
    except OSError as err:
        # ELOOP: a link put there since the look; ENXIO: a FIFO nobody reads.
        if err.errno in (errno.ELOOP, errno.ENXIO):
            raise _not_own(path, "a link or a FIFO") from None
        raise
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise _not_own(path, "not a regular file")
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "a" if append else "w", encoding="utf-8")


def _not_own(path: Path, what: str) -> DdpimgError:
    return DdpimgError(
        f"{printable(str(path))} is {what}: ddpimg writes its own files there, never "
        "through a link",
        hint="remove it, or use another --out",
    )
