"""Checkpoint directories on disk: atomic publication, the completion marker, validation,
the newest-first listing and pruning. No torch here: these are files and names.

A checkpoint is ``<out>/checkpoints/step-NNNNNNNN/``. It is assembled in
``.step-NNNNNNNN.tmp/`` beside it; once every rank wrote its part and fsynced it, rank 0
writes ``complete.json`` last (size and SHA-256 of every other file), fsyncs it, renames
the directory to its final name and fsyncs ``checkpoints/``. A directory without a valid
marker, or whose files differ from what the marker says (truncated, corrupt, missing), is
not a checkpoint; ``verify`` says why.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

from ddpimg.fsio import fsync_path, write_json_atomic
from ddpimg.untrusted import MIB, read_json

CHECKPOINTS = "checkpoints"
MARKER = "complete.json"
# A line of about 150 bytes a file: room for every rank's files of a very large run.
MARKER_LIMIT = 64 * MIB
FORMAT = 1
_NAME = re.compile(r"step-(\d{8,})")
_HASH_CHUNK = 1 << 20


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def staging_name(step: int) -> str:
    """Where the checkpoint of ``step`` is assembled; never taken for a checkpoint."""
    return f".{checkpoint_name(step)}.tmp"


def step_of(path: Path) -> int | None:
    """The step in a checkpoint directory's name, None for any other name."""
    match = _NAME.fullmatch(path.name)
    return int(match.group(1)) if match else None


def candidates(root: Path) -> list[Path]:
    """Checkpoint directories under ``root`` (a ``checkpoints`` folder), newest step first;
    staging folders and other names are left out. Empty when ``root`` does not exist."""
    if not root.is_dir():
        return []
    found = [path for path in root.iterdir() if path.is_dir() and step_of(path) is not None]
    return sorted(found, key=lambda path: step_of(path) or 0, reverse=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _content(directory: Path) -> list[Path]:
    """Every file under ``directory`` but the marker, as sorted relative paths."""
    found = [
        Path(parent, name).relative_to(directory)
        for parent, _, files in os.walk(directory)
        for name in files
    ]
    return sorted(path for path in found if path != Path(MARKER))


def write_marker(directory: Path, step: int) -> None:
    """Record size and SHA-256 of every file in ``directory`` in its marker, written last
    (temporary name, fsync, rename, fsync of the folder)."""
    files = {
        path.as_posix(): {
            "size": (directory / path).stat().st_size,
            "sha256": _sha256(directory / path),
        }
        for path in _content(directory)
    }
    marker = {"format": FORMAT, "step": step, "files": files}
    write_json_atomic(directory / MARKER, marker, indent=1)


def verify(directory: Path) -> str | None:
    """Why ``directory`` is not a complete checkpoint, or None when it is: the marker is
    there and valid, and every file it lists has its size and checksum."""
    if not directory.is_dir():
        return "does not exist" if not directory.exists() else "is not a directory"
    marker = directory / MARKER
    if not marker.is_file():
        return f"has no {MARKER} (the save did not finish, or this is not a checkpoint)"
    try:
        content: Any = read_json(marker, MARKER_LIMIT)
    except (OSError, ValueError) as err:
        return f"{MARKER} is unreadable ({err})"
    if not isinstance(content, dict) or content.get("format") != FORMAT:
        return f"{MARKER} is not a format-{FORMAT} marker"
    files = content.get("files")
    if not isinstance(files, dict) or not files:
        return f"{MARKER} lists no files"
    for name, expected in sorted(files.items()):
        path = directory / name
        if not isinstance(expected, dict) or set(expected) != {"size", "sha256"}:
            return f"{MARKER} entry {name!r} is malformed"
        if Path(name).is_absolute() or ".." in Path(name).parts:
            return f"{MARKER} lists {name!r}, a file outside the checkpoint"
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != expected["size"]:
            return f"{name} has {size} bytes, {MARKER} says {expected['size']} (truncated?)"
        if _sha256(path) != expected["sha256"]:
            return f"{name} does not match its SHA-256 in {MARKER} (corrupt)"
    return None


def publish(staging: Path, final: Path) -> None:
    """Rename the finished ``staging`` folder to ``final`` durably. An existing ``final``
    (the same step saved again, e.g. at the end of an epoch whose last step was saved on
    preemption) is moved aside first and removed once the new one is in place."""
    replaced = final.with_name(f".{final.name}.replaced")
    if final.exists():
        os.replace(final, replaced)
    os.replace(staging, final)
    fsync_path(final.parent)
    if replaced.exists():
        shutil.rmtree(replaced)


def remove_leftovers(root: Path) -> None:
    """Remove staging and replaced folders that a crashed save left behind."""
    if not root.is_dir():
        return
    for path in root.iterdir():
        if path.name.startswith(".step-") and path.is_dir():
            shutil.rmtree(path)


def prune(root: Path, keep: int, current_step: int) -> list[Path]:
    """Keep the ``keep`` newest checkpoints up to ``current_step``; remove the others, and
    every checkpoint beyond ``current_step`` (left by a run that was resumed from an
    earlier one: they belong to an abandoned trajectory, or were invalid). Returns what
    was removed."""
    removed: list[Path] = []
    kept = 0
    for path in candidates(root):
        if (step_of(path) or 0) <= current_step and kept < keep:
            kept += 1
            continue
        shutil.rmtree(path)
        removed.append(path)
    return removed
