"""Reading what a user may have been handed: a file, a folder or a JSON document from someone
else's run directory, checkpoint, dataset or profile. The one rule every such reader follows
(docs/security.md, "Reading what you were handed"):

* A file is read only when it is a regular file, and only up to a bound on its size that is
  checked before anything is read: a FIFO waits forever for a writer, ``/dev/zero`` never
  ends, a device may act on being opened; each is refused, by ``stat``, before it is opened.
* JSON is parsed with bounds on its nesting and on the digits of its numbers: Python's
  parser raises RecursionError (not a ValueError) on deep nesting, and a number of 5,000
  digits makes ``int()`` refuse with a ValueError that is no JSONDecodeError.
* A walk of a folder follows a link only to a folder inside the folder it walks, and enters
  no folder twice: a link to ``..`` would read another class's images as this one's, two
  links to ``.`` would make the walk exponential.
* Names are shown through ``errors.printable``: a name is text, never a terminal command.

A refusal is a ``BadInput``, a ValueError whose text says what was found, so that a reader's
``except ValueError`` turns it into the reader's own named error (``ddpimg: error: FILE:
...``, exit status 2); the path is the caller's to name.

Cheap to import (``ddpimg env`` reads a site profile through it): os and stat only; json is
imported where a document is parsed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ddpimg.errors import printable

KIB = 1 << 10
MIB = 1 << 20
# Deeper than any document ddpimg reads or writes (a profile trace event: 5 levels), far
# below the interpreter's recursion limit, so that code walking a parsed document recursively
# (json.dumps, a comparison) cannot run out of stack either.
MAX_JSON_DEPTH = 64
# A count, size or id has at most 20 digits (2**64); a longer number is not one, and
# converting it costs time quadratic in its length.
MAX_NUMBER_DIGITS = 40

_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


class BadInput(ValueError):
    """What makes a file, folder or document unreadable within bounds, in words that follow
    its name: ``a FIFO (named pipe), not a regular file``."""


def size_text(size: int) -> str:
    """A bound in words: ``1 MiB``, ``64 KiB``, ``512 bytes``."""
    for unit, name in ((MIB, "MiB"), (KIB, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def check_regular(path: str | os.PathLike[str]) -> os.stat_result:
    """``path``'s status (links followed) when it is a regular file; BadInput for a FIFO, a
    device, a socket or a folder, which is therefore never opened. OSError (a missing file)
    passes through."""
    status = os.stat(path)
    if not stat.S_ISREG(status.st_mode):
        raise BadInput(f"{_kind(status.st_mode)}, not a regular file")
    return status


def open_regular(path: str | os.PathLike[str], flags: int = os.O_RDONLY) -> int:
    """A descriptor of the regular file ``path``, checked before and after opening (a FIFO
    put in its place in between is opened without blocking, then refused)."""
    check_regular(path)
    descriptor = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise BadInput(f"{_kind(mode)}, not a regular file")
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def too_large(size: int, limit: int) -> BadInput:
    return BadInput(f"{size:,} bytes, more than the {size_text(limit)} such a file may have")


def read_bytes(path: str | os.PathLike[str], limit: int) -> bytes:
    """The content of the regular file ``path``, at most ``limit`` bytes (a larger file is
    refused before it is read; one that grows past the bound while read, after)."""
    size = check_regular(path).st_size
    if size > limit:
        raise too_large(size, limit)
    descriptor = open_regular(path)
    try:
        parts: list[bytes] = []
        left = limit + 1
        while left > 0 and (chunk := os.read(descriptor, min(left, MIB))):
            parts.append(chunk)
            left -= len(chunk)
    finally:
        os.close(descriptor)
    data = b"".join(parts)
    if len(data) > limit:
        raise too_large(len(data), limit)
    return data


def decode_text(data: bytes) -> str:
    """``data`` as UTF-8; BadInput naming the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadInput(f"not UTF-8 text (byte {err.start})") from None


def read_text(path: str | os.PathLike[str], limit: int) -> str:
    """``read_bytes`` as UTF-8 text."""
    return decode_text(read_bytes(path, limit))


def read_lines(path: str | os.PathLike[str], max_line: int) -> Iterator[str]:
    """The lines of the regular file ``path`` as UTF-8 text, each with its newline (the last
    may lack one), one at a time: a file of any length is read in bounded memory, and a
    line longer than ``max_line`` bytes is a BadInput before it is read whole."""
    with os.fdopen(open_regular(path), "rb") as stream:
        number = 0
        while line := stream.readline(max_line + 1):
            number += 1
            if len(line) > max_line:
                raise BadInput(f"line {number} is longer than {size_text(max_line)}")
            try:
                yield line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise BadInput(f"line {number} is not UTF-8 text (byte {err.start})") from None


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_NUMBER_DIGITS:
        raise BadInput(f"a number of {digits:,} digits (at most {MAX_NUMBER_DIGITS})")
    return int(text)


def _depth(document: Any) -> int:
    """How deeply ``document``'s lists and objects nest, without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = value.values()
        elif not isinstance(value, list):
            continue
        deepest = max(deepest, depth + 1)
        if deepest > MAX_JSON_DEPTH:
            break
        stack.extend((item, depth + 1) for item in value)
    return deepest


def parse_json(text: str | bytes) -> Any:
    """``text`` parsed as JSON, within ``MAX_JSON_DEPTH`` levels and ``MAX_NUMBER_DIGITS``
    digits a number; BadInput for anything else."""
    import json

    if isinstance(text, bytes):  # UTF-8 only: json.loads would guess UTF-16 from a BOM
        text = decode_text(text)
    try:
        document = json.loads(text, parse_int=_bounded_int)
    except RecursionError:
        raise BadInput(f"JSON nested more than {MAX_JSON_DEPTH} levels deep") from None
    except json.JSONDecodeError as err:
        raise BadInput(f"not JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
    except BadInput:
        raise
    except ValueError as err:  # int()'s own digit limit, before parse_int is asked
        raise BadInput(f"not JSON within bounds ({err})") from None
    if _depth(document) > MAX_JSON_DEPTH:
        raise BadInput(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    return document


def read_json(path: str | os.PathLike[str], limit: int) -> Any:
    """The JSON document in the regular file ``path`` of at most ``limit`` bytes."""
    return parse_json(read_bytes(path, limit))


def inside(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``root`` or lies under it, both with their links resolved."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def walk(root: str | os.PathLike[str]) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(root, followlinks=True)``, top-down, each list sorted, but within bounds: a
    link to a folder is followed only when the folder lies inside ``root`` (links resolved),
    and no folder is entered twice. Either is a BadInput naming the link; an unreadable
    folder is an OSError, not skipped in silence."""
    top = os.fspath(root)
    entered: set[tuple[int, int]] = set()
    pending = [top]
    while pending:
        folder = pending.pop()
        status = os.stat(folder)
        if (status.st_dev, status.st_ino) in entered:
            raise BadInput(
                f"{printable(folder)} is a folder the walk of {printable(top)} already "
                "went through (a loop of links, or a second link to it)"
            )
        entered.add((status.st_dev, status.st_ino))
        folders: list[str] = []
        files: list[str] = []
        with os.scandir(folder) as entries:
            for entry in entries:
                if not entry.is_dir():
                    files.append(entry.name)
                    continue
                if entry.is_symlink() and not inside(entry.path, top):
                    raise BadInput(
                        f"{printable(entry.path)} is a link to "
                        f"{printable(os.path.realpath(entry.path))}, outside {printable(top)}"
                    )
                folders.append(entry.name)
        folders.sort()
        files.sort()
        yield folder, folders, files
        pending.extend(os.path.join(folder, name) for name in reversed(folders))


def files_inside(root: Path) -> list[Path]:
    """Every file under ``root`` (a ``walk``), relative to it, sorted; a link to a file
    outside ``root`` is a BadInput naming it."""
    found: list[Path] = []
    for folder, _, files in walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.islink(path) and not inside(path, root):
                raise BadInput(
                    f"{printable(path)} is a link to {printable(os.path.realpath(path))}, "
                    f"outside {printable(str(root))}"
                )
            found.append(Path(path).relative_to(root))
    return sorted(found)
