"""A table of samples on disk, read without loading it: one ``.npy`` file per numeric column
and a byte blob plus offsets per string column, memory-mapped, and ``table.json`` with what
the table describes.

Why not a Python list: ImageNet has 1.28M training images. As a list of paths that is
about 150 MB per process, and every DataLoader worker touching the list's reference counts
makes the fork's copy-on-write pages private, so the memory grows with workers x dataset.
Memory-mapped arrays cost only the pages read, shared by every process of the node.

A table is written to a temporary directory and renamed into place, so a reader sees a
whole table or none; ``FORMAT`` in ``table.json`` tells apart tables of another layout,
which are then rebuilt.
"""

from __future__ import annotations

import json
import os
import shutil
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ddpimg.fsio import fsync_tree
from ddpimg.untrusted import MIB, check_regular, read_json

FORMAT = 1
META_FILE = "table.json"
# The image listing keeps the time of every folder it walked: about 50 bytes a folder.
META_LIMIT = 256 * MIB
_BLOB = ".blob.npy"
_OFFSETS = ".offsets.npy"
# What np.load raises, besides OSError and ValueError, for a damaged .npy file: an empty
# file, and a header its parser (tokenize, ast) cannot read.
_DAMAGED_NPY = (EOFError, SyntaxError, tokenize.TokenError)


@dataclass(frozen=True)
class SampleTable:
    """The columns of a table, memory-mapped, and its ``meta`` (``table.json``)."""

    directory: Path
    meta: dict[str, Any]
    numbers: Mapping[str, np.ndarray]
    strings: Mapping[str, tuple[np.ndarray, np.ndarray]]

    def __len__(self) -> int:
        return int(self.meta["rows"])

    def string(self, column: str, row: int) -> str:
        blob, offsets = self.strings[column]
        return bytes(blob[offsets[row] : offsets[row + 1]]).decode("utf-8", "surrogateescape")


def encode_strings(values: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """A string column: the UTF-8 bytes of all values in one uint8 array, and int64 offsets
    (``len(values) + 1``: value i is ``blob[offsets[i]:offsets[i + 1]]``)."""
    encoded = [value.encode("utf-8", "surrogateescape") for value in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(item) for item in encoded], out=offsets[1:])
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return blob, offsets


def write_table(
    directory: Path,
    meta: Mapping[str, Any],
    numbers: Mapping[str, np.ndarray],
    strings: Mapping[str, Sequence[str]],
) -> None:
    """Write (or replace) the table in ``directory``: every column has the same number of
    rows; ``meta`` gets ``rows`` and ``format`` added."""
    lengths = {len(column) for column in numbers.values()} | {len(v) for v in strings.values()}
    if len(lengths) > 1:
        raise ValueError(f"table columns have different lengths: {sorted(lengths)}")
    rows = lengths.pop() if lengths else 0
    staging = directory.with_name(f".{directory.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        for name, column in numbers.items():
            np.save(staging / f"{name}.npy", np.ascontiguousarray(column))
        for name, values in strings.items():
            blob, offsets = encode_strings(values)
            np.save(staging / f"{name}{_BLOB}", blob)
            np.save(staging / f"{name}{_OFFSETS}", offsets)
        header = {**meta, "rows": rows, "format": FORMAT}
        (staging / META_FILE).write_text(json.dumps(header, indent=1, sort_keys=True) + "\n")
        fsync_tree(staging)
        old = directory.with_name(f".{directory.name}.{os.getpid()}.old")
        if directory.exists():
            directory.rename(old)
        staging.rename(directory)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def read_table(
    directory: Path, numbers_needed: Sequence[str] = (), strings_needed: Sequence[str] = ()
) -> SampleTable | None:
    """The table in ``directory``, memory-mapped; None when there is none, one of another
    format, or one that is not whole (a column missing from ``numbers_needed`` /
    ``strings_needed``, of another length, or not integers; string offsets that do not
    walk their blob): an index is a cache, rebuilt rather than trusted."""
    try:
        meta = read_json(directory / META_FILE, META_LIMIT)
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    rows = meta.get("rows")
    if type(rows) is not int or rows < 0:
        return None
    numbers: dict[str, np.ndarray] = {}
    strings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    try:
        for path in sorted(directory.glob("*.npy")):
            name = path.name
            check_regular(path)  # a FIFO named like a column would block np.load
            if name.endswith(_BLOB):
                column = name.removesuffix(_BLOB)
                offsets = directory / f"{column}{_OFFSETS}"
                check_regular(offsets)
                strings[column] = (np.load(path, mmap_mode="r"), np.load(offsets, mmap_mode="r"))
            elif not name.endswith(_OFFSETS):
                numbers[name.removesuffix(".npy")] = np.load(path, mmap_mode="r")
    except (OSError, ValueError, *_DAMAGED_NPY):
        return None
    if not (set(numbers_needed) <= numbers.keys() and set(strings_needed) <= strings.keys()):
        return None
    whole = all(_integer_column(column, rows) for column in numbers.values()) and all(
        _walks(blob, offsets, rows) for blob, offsets in strings.values()
    )
    return SampleTable(directory, meta, numbers, strings) if whole else None


def _integer_column(column: np.ndarray, rows: int) -> bool:
    return column.ndim == 1 and len(column) == rows and column.dtype.kind in "iu"


def _walks(blob: np.ndarray, offsets: np.ndarray, rows: int) -> bool:
    """Whether ``offsets`` cut ``blob`` into ``rows`` strings: from 0 to its end, never
    going back."""
    if blob.ndim != 1 or blob.dtype != np.uint8 or not _integer_column(offsets, rows + 1):
        return False
    return (
        int(offsets[0]) == 0
        and int(offsets[-1]) == len(blob)
        and bool(np.all(offsets[1:] >= offsets[:-1]))
    )
