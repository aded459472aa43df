"""Durable file writes: a reader (or a node that crashes mid-write) sees either the old file
or the new one, never part of it. Used by the run outputs and the checkpoints alike."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


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


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: temporary file beside it, fsync, rename, fsync of the
    folder."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)  # a full disk must not also fill up with leftovers
        raise
    fsync_path(path.parent)


def write_json_atomic(path: Path, data: Mapping[str, Any], indent: int = 2) -> None:
    """``write_text_atomic`` of ``data`` as sorted, indented JSON."""
    write_text_atomic(path, json.dumps(data, indent=indent, sort_keys=True) + "\n")
