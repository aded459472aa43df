"""The header reader against tarfile's own writers, in every format they write."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from ddpimg.data.tarheaders import Member, TarFormatError, members

NAMES = [
    "short.jpg",
    "dir/" * 30 + "long-directories.jpg",  # ustar: prefix field; GNU: L; pax: x
    "n" * 120 + ".cls",  # a long file name: no prefix can hold it
    "ünïcode/ñame.png",
    "empty.txt",
]


def write(path: Path, fmt: int) -> dict[str, bytes]:
    contents = {name: (name.encode() * 100)[: 700 + 13 * i] for i, name in enumerate(NAMES)}
    contents["empty.txt"] = b""
    with tarfile.open(path, "w", format=fmt) as tar:
        directory = tarfile.TarInfo("a-directory")
        directory.type = tarfile.DIRTYPE
        tar.addfile(directory)  # not a file
        for name, data in contents.items():
            if fmt == tarfile.USTAR_FORMAT and len(name.split("/")[-1]) > 100:
                continue  # ustar cannot store it
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return contents


def read(path: Path) -> list[Member]:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        return list(members(descriptor, os.fstat(descriptor).st_size))
    finally:
        os.close(descriptor)


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_members_are_tarfiles_members(tmp_path: Path, fmt: int) -> None:
    path = tmp_path / "shard.tar"
    try:
        contents = write(path, fmt)
    except ValueError:
        pytest.skip("tarfile cannot write these names in this format")
    with tarfile.open(path) as tar:
        expected = [(m.name, m.offset_data, m.size) for m in tar if m.isfile()]
    found = read(path)
    assert [(m.name, m.offset, m.size) for m in found if m.is_file] == expected
    assert [m.name for m in found if not m.is_file] == ["a-directory/"]
    raw = path.read_bytes()
    for member in found:
        if member.is_file:
            assert raw[member.offset : member.offset + member.size] == contents[member.name]


def test_a_damaged_header_or_a_cut_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "shard.tar"
    write(path, tarfile.PAX_FORMAT)
    raw = bytearray(path.read_bytes())
    damaged = tmp_path / "damaged.tar"
    raw[10] ^= 0xFF
    damaged.write_bytes(bytes(raw))
    with pytest.raises(TarFormatError, match=r"bad header checksum at byte 0"):
        read(damaged)
    cut = tmp_path / "cut.tar"
    cut.write_bytes(path.read_bytes()[:1500])
    with pytest.raises(TarFormatError, match=r"runs past the end of the file|ends inside"):
        read(cut)
