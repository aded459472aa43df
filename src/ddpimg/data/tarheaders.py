"""The members of a tar file, read from their 512-byte headers alone.

Why not ``tarfile``: it builds a full ``TarInfo`` per member, about 100 us each, which for
ImageNet's 2 x 1.28M members of shards made by other tools is minutes before the first step.
Reading the header blocks with ``pread`` and skipping the data is about 15x cheaper. The
formats are POSIX's (ustar, its ``prefix`` field for long paths, pax extended headers ``x``
and ``g``) and GNU's (``L`` long names, base-256 sizes): what tarfile, GNU tar and
WebDataset's writers produce.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

BLOCK = 512
_REGULAR = (b"0", b"\0", b"7")  # a file; "7" is a contiguous file, read as one
_GNU_LONG_NAME = b"L"
_PAX = (b"x", b"g")


class TarFormatError(ValueError):
    """The bytes are not a (whole) tar file; the message says where."""


@dataclass(frozen=True)
class Member:
    name: str
    offset: int  # of its data
    size: int
    is_file: bool


def _number(field: bytes) -> int:
    """A size or checksum field: octal text, or GNU's base-256 when the high bit is set."""
    if field[0] & 0x80:
        return int.from_bytes(field[1:], "big")
    text = field.rstrip(b" \0").lstrip(b" ")
    return int(text, 8) if text else 0


def _checksum_matches(header: bytes) -> bool:
    """The header's checksum (the sum of its bytes, the checksum field counted as spaces),
    compared modulo 65521: adler32 computes that sum in C, 30x faster than ``sum()`` in
    Python; a damaged header still fails it but for one chance in 65521."""
    stored = _number(header[148:156])
    as_spaces = header[:148] + b"        " + header[156:]
    return (zlib.adler32(as_spaces) & 0xFFFF) == (1 + stored) % 65521


def _pax_path(data: bytes) -> str | None:
    """The ``path`` record of a pax extended header ("LENGTH path=VALUE\\n" records)."""
    at = 0
    found = None
    while at < len(data):
        space = data.index(b" ", at)
        length = int(data[at:space])
        key, _, value = data[space + 1 : at + length - 1].partition(b"=")
        if key == b"path":
            found = value.decode("utf-8", "surrogateescape")
        at += length
    return found


def members(descriptor: int, size: int) -> Iterator[Member]:
    """The members of the tar file open as ``descriptor`` (``size`` bytes), in order."""
    offset = 0
    long_name: str | None = None
    while offset + BLOCK <= size:
        header = os.pread(descriptor, BLOCK, offset)
        if header.count(0) == BLOCK:
            return  # the end-of-archive blocks
        if not _checksum_matches(header):
            raise TarFormatError(f"bad header checksum at byte {offset}")
        length = _number(header[124:136])
        kind = header[156:157]
        data = offset + BLOCK
        if data + length > size:
            raise TarFormatError(f"the member at byte {offset} runs past the end of the file")
        if kind == _GNU_LONG_NAME:
            text = os.pread(descriptor, length, data).rstrip(b"\0")
            long_name = text.decode("utf-8", "surrogateescape")
        elif kind in _PAX:
            path = _pax_path(os.pread(descriptor, length, data))
            if kind == b"x" and path is not None:
                long_name = path
        else:
            name = header[:100].rstrip(b"\0").decode("utf-8", "surrogateescape")
            # POSIX ustar keeps long paths' directories in "prefix"; GNU's "ustar  " header
            # has other fields there.
            prefix = header[345:500].rstrip(b"\0") if header[257:263] == b"ustar\0" else b""
            if prefix and long_name is None:
                name = prefix.decode("utf-8", "surrogateescape") + "/" + name
            yield Member(long_name or name, data, length, kind in _REGULAR)
            long_name = None
        offset = data + -(-length // BLOCK) * BLOCK
    if offset < size:
        raise TarFormatError(f"the file ends inside the header at byte {offset}")
