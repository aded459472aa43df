"""A tar stream from the login node written into a run's local directory, trusting nothing
of it.

Only regular files are written, and only under the names the caller accepts (``accept``):
an entry that is a link, a device, a directory trick, an absolute path or one with ``..``
is skipped and counted, never followed. Each directory on the way is opened without
following a symbolic link (a link planted in the local directory does not lead out of it),
each file is written under a temporary name and renamed into place, and the total written is
bounded (``max_bytes``): the stream cannot fill the disk.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Protocol

from ddpimg.errors import DdpimgError, printable

_CHUNK = 1 << 20
MAX_DEPTH = 32
MAX_NAME = 4096
MAX_ENTRIES = 100_000
# Headers and padding beyond the files' bytes that a stream may hold, in all and between two
# members (tarfile reads 10 kB records).
OVERHEAD = 64 << 20
HEADER_BYTES = 1 << 20
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Unpacked:
    """What was written (relative names) and what was skipped (names, escaped)."""

    written: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    size: int = 0


def clean_name(name: str) -> str | None:
    """``name`` as a relative path under the run's directory (``./`` dropped), or None when
    it is not one: absolute, ``..``, empty, too deep or with a control character."""
    if not name or len(name) > MAX_NAME or not name.isprintable() or "\\" in name:
        return None
    path = PurePosixPath(name)
    if path.is_absolute():
        return None
    parts = [part for part in path.parts if part != "."]
    if not parts or ".." in parts or len(parts) > MAX_DEPTH:
        return None
    return "/".join(parts)


def unpack(
    stream: IO[bytes] | _Readable, target: Path, accept: Callable[[str], bool], max_bytes: int
) -> Unpacked:
    """Write the regular files of the tar ``stream`` that ``accept`` takes into ``target``
    (created if missing)."""
    target.mkdir(parents=True, exist_ok=True)
    done = Unpacked()
    root = _open_directory(target)
    bounded = _Bounded(stream, max_bytes + OVERHEAD, target)
    try:
        with tarfile.open(fileobj=bounded, mode="r|") as tar:  # type: ignore[call-overload]
            for count, member in enumerate(tar):
                bounded.next_member(max(member.size, 0))
                if count >= MAX_ENTRIES:
                    raise _refused(target, f"more than {MAX_ENTRIES} entries")
                name = clean_name(member.name)
                if name is not None and member.isdir():
                    continue  # folders are made as the files in them need them
                if name is None or not member.isreg() or not accept(name):
                    done.skipped.append(printable(member.name)[:200])
                    continue
                if done.size + member.size > max_bytes:
                    raise _refused(
                        target,
                        f"{printable(name)} would pass the limit of {max_bytes} bytes",
                        hint="raise --max-size if the run really is that large",
                    )
                source = tar.extractfile(member)
                if source is None:
                    done.skipped.append(printable(member.name)[:200])
                    continue
                _write(root, target, name, source, member.size)
                done.size += member.size
                done.written.append(name)
    except tarfile.TarError as err:
        raise _refused(target, f"the stream is not a tar archive ({err})") from err
    finally:
        os.close(root)
    return done


class _Readable(Protocol):
    def read(self, size: int = -1) -> bytes: ...


class _Bounded:
    """``stream`` that refuses to be read past ``limit`` bytes in all, or past a member's
    size and HEADER_BYTES between two members: a header that claims gigabytes (tarfile reads a
    pax header whole, into memory) ends the fetch, not the memory."""

    def __init__(self, stream: IO[bytes] | _Readable, limit: int, target: Path) -> None:
        self.stream = stream
        self.limit = limit
        self.target = target
        self.count = 0
        self.budget = HEADER_BYTES

    def next_member(self, size: int) -> None:
        """A member of ``size`` bytes was read: its data and the next headers may follow."""
        self.budget = size + HEADER_BYTES

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > self.budget or self.count + size > self.limit:
            raise _refused(
                self.target,
                f"the stream is larger than asked for (past {self.count} bytes)",
                hint="raise --max-size if the run really is that large",
            )
        data = self.stream.read(size)
        self.count += len(data)
        self.budget -= len(data)
        return data


def _refused(target: Path, what: str, hint: str | None = None) -> DdpimgError:
    return DdpimgError(
        f"fetching into {target}: {what}",
        hint=hint or "the files written before this are kept; fetch again to complete them",
    )


def _open_directory(path: Path) -> int:
    try:
        return os.open(path, _DIRECTORY)
    except OSError as err:
        raise _refused(
            path, f"cannot open it ({err.strerror})", "give a directory of your own"
        ) from err


def _write(root: int, target: Path, name: str, source: IO[bytes], size: int) -> None:
    """``name`` under the directory ``root``, from ``size`` bytes of ``source``: each
    directory on the way made or opened without following a link, the file written to a
    temporary name and renamed."""
    *folders, base = name.split("/")
    descriptors = [root]
    try:
        for folder in folders:
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, 0o755, dir_fd=descriptors[-1])
            try:
                descriptors.append(os.open(folder, _DIRECTORY, dir_fd=descriptors[-1]))
            except OSError as err:
                why = (
                    "a link or not a directory"
                    if err.errno in (errno.ELOOP, errno.ENOTDIR)
                    else err.strerror
                )
                raise _refused(target, f"{printable(name)}: {printable(folder)} is {why}") from err
        here = descriptors[-1]
        temporary = f".{base}.fetch.{os.getpid()}.tmp"
        descriptor = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
            dir_fd=here,
        )  # fmt: skip
        try:
            with os.fdopen(descriptor, "wb") as out:
                left = size
                while left > 0:
                    chunk = source.read(min(_CHUNK, left))
                    if not chunk:
                        raise _refused(target, f"{printable(name)}: the stream ended inside it")
                    out.write(chunk)
                    left -= len(chunk)
            # A directory of that name (from an earlier fetch, or planted) is not replaced.
            os.rename(temporary, base, src_dir_fd=here, dst_dir_fd=here)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=here)
            raise
    except OSError as err:
        raise _refused(target, f"{printable(name)}: {err.strerror}") from err
    finally:
        for descriptor in descriptors[1:]:
            os.close(descriptor)
