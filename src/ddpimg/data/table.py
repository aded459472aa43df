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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ddpimg.fsio import fsync_tree

FORMAT = 1
META_FILE = "table.json"
_BLOB = ".blob.npy"
_OFFSETS = ".offsets.npy"


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


def read_table(directory: Path) -> SampleTable | None:
    """The table in ``directory``, memory-mapped; None when there is none, or one of another
    format (to be rebuilt)."""
    try:
        meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    numbers: dict[str, np.ndarray] = {}
    strings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    try:
        for path in sorted(directory.glob("*.npy")):
            name = path.name
            if name.endswith(_BLOB):
                column = name.removesuffix(_BLOB)
                offsets = directory / f"{column}{_OFFSETS}"
                strings[column] = (np.load(path, mmap_mode="r"), np.load(offsets, mmap_mode="r"))
            elif not name.endswith(_OFFSETS):
                numbers[name.removesuffix(".npy")] = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return None
    return SampleTable(directory, meta, numbers, strings)
