"""Open a dataset directory's two splits as ``ImageSource``s, whatever its layout, building
their index first where none is valid (``prepare``: one process does it, the others then
``open_splits``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from ddpimg.data import imagefolder, tarshards
from ddpimg.data.images import (
    LAYOUT_HINT,
    SPLITS,
    ImageSource,
    detect_layout,
    find_index,
    writable_index_dir,
)
from ddpimg.errors import DataError


def _valid(root: Path, layout: str, split: str) -> Callable[[Path], bool]:
    """Whether an index folder holds a valid index of ``split``."""
    if layout == "folder":
        return lambda directory: imagefolder.read_listing(root / split, directory) is not None
    return lambda directory: tarshards.read_index(root, split, directory) is not None


def prepare(root: Path, fallback: Path, stream: TextIO | None = None) -> list[Path]:
    """Make sure both splits of ``root`` have a valid index, building the missing ones
    (reported on ``stream``); returns the index folders."""
    layout = detect_layout(root)
    classes = imagefolder.folder_classes(root) if layout == "folder" else []
    found = []
    for split in SPLITS:
        existing = find_index(root, fallback, split, _valid(root, layout, split))
        if existing is not None:
            found.append(existing)
            continue
        directory = writable_index_dir(root, fallback) / split
        began = time.monotonic()
        if stream is not None:
            print(f"ddpimg: indexing {root} ({split}) into {directory}", file=stream, flush=True)
        if layout == "folder":
            imagefolder.write_listing(root / split, classes, directory)
        else:
            tarshards.write_index(root, split, directory)
        if stream is not None:
            print(
                f"ddpimg: indexed {root} ({split}) in {time.monotonic() - began:.1f} s; later "
                "runs reuse the index",
                file=stream,
                flush=True,
            )
        found.append(directory)
    return found


def open_splits(root: Path, fallback: Path) -> tuple[ImageSource, ImageSource]:
    """The training and evaluation splits of ``root`` through their indexes (``prepare``
    made them); DataError when a split holds no sample."""
    layout = detect_layout(root)
    sources: list[ImageSource] = []
    tables = []
    for split in SPLITS:
        directory = find_index(root, fallback, split, _valid(root, layout, split))
        if directory is None:
            raise DataError(
                f"--data {root}: the index of {split} changed while it was read",
                hint="do not change the dataset while a run starts; run again",
            )
        if layout == "folder":
            table = imagefolder.read_listing(root / split, directory)
        else:
            table = tarshards.read_index(root, split, directory)
        if table is None:
            raise DataError(f"--data {root}: the index of {split} vanished", hint="run again")
        if len(table) == 0:
            where = root / split if layout == "folder" else f"{root}/{split}-*.tar"
            raise DataError(f"--data: {where} holds no image files", hint=LAYOUT_HINT)
        tables.append(table)
    if layout == "folder":
        for split, table in zip(SPLITS, tables, strict=True):
            sources.append(imagefolder.FolderSource(root / split, table))
        return sources[0], sources[1]
    top = max(int(table.numbers["label"].max()) for table in tables)
    classes = tarshards.dataset_classes(root, top + 1)
    train, val = (tarshards.TarSource(root, table, classes) for table in tables)
    return train, val
