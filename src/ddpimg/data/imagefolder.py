"""An ImageFolder tree, ``ROOT/SPLIT/CLASS/**/FILE``, as torchvision's ``ImageFolder`` reads
it: classes are the sorted sub-folder names of the split, the files of each class are
walked in sorted order (a link to a folder followed once, inside the class folder; a link
out of it, around a loop or to a folder already walked refused), and a file is an image by
its extension (``IMAGE_EXTENSIONS``, any case).

The listing is kept as a ``SampleTable`` (column ``path``: relative to the split folder;
``label``) with the modification time of every folder it walked: a folder gains or loses an
entry only by changing its time, so comparing those times (one ``stat`` per folder, about a
thousand for ImageNet) tells whether the tree changed since it was listed. Listing
ImageNet's 1.28M files costs seconds on a local disk and minutes on a busy parallel file
system; it is done once.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ddpimg.data.images import LAYOUT_HINT, MAX_CLASSES, SPLITS, is_image_name
from ddpimg.data.table import SampleTable, read_table, write_table
from ddpimg.errors import DataError, printable
from ddpimg.untrusted import BadInput, open_regular, walk

KIND = "imagefolder"


def folder_classes(root: Path) -> list[str]:
    """The class names of the tree ``root`` (with ``train/`` and ``val/``), in label order;
    DataError when the two splits have different class folders."""
    train, val = (_class_folders(root / split) for split in SPLITS)
    if len(train) > MAX_CLASSES:
        raise DataError(
            f"--data {root}: train/ has {len(train):,} class folders, more than {MAX_CLASSES:,}",
            hint="an ImageFolder tree has a folder per class under train/ and val/",
        )
    if train != val:
        only_train = sorted(set(train) - set(val))[:5]
        only_val = sorted(set(val) - set(train))[:5]
        raise DataError(
            f"--data {root}: train/ and val/ have different class folders (only in train/: "
            f"{only_train or 'none'}, only in val/: {only_val or 'none'})",
            hint="both splits need a folder for every class, even an empty one",
        )
    return train


def _class_folders(folder: Path) -> list[str]:
    try:
        return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    except OSError as err:
        raise DataError(f"--data: {folder}: {err.strerror}", hint=LAYOUT_HINT) from err


def list_split(folder: Path, classes: list[str]) -> tuple[list[str], np.ndarray, dict[str, int]]:
    """The image files of ``folder`` (paths relative to it), their labels, and the
    modification time of every folder walked, ``.`` for ``folder`` itself. Each class
    folder is walked within itself (``untrusted.walk``): a link out of it (``cat/up ->
    ..``, which would label the other classes' images as this one) or around a loop is a
    DataError naming it."""
    paths: list[str] = []
    labels: list[int] = []
    times = {".": _mtime(folder)}
    for label, name in enumerate(classes):
        try:
            walked = sorted(walk(folder / name))
        except (OSError, BadInput) as err:
            raise DataError(
                f"--data: class {printable(name)} of {folder}: {err}",
                hint="a class folder holds its own images, each reached once: a link out of "
                "it, or to a folder already walked, is not followed; move or remove the link",
            ) from err
        for parent, _, files in walked:
            relative = os.path.relpath(parent, folder)
            times[relative] = _mtime(Path(parent))
            for file_name in files:
                if is_image_name(file_name):
                    paths.append(os.path.join(relative, file_name))
                    labels.append(label)
    return paths, np.asarray(labels, dtype=np.int32), times


def _mtime(path: Path) -> int:
    """Whole seconds: what copies (``cp -p``, rsync, tar) and squashfs images keep."""
    return int(os.stat(path).st_mtime)


def write_listing(folder: Path, classes: list[str], directory: Path) -> None:
    """List ``folder`` and write the listing to ``directory``."""
    paths, labels, times = list_split(folder, classes)
    meta = {"kind": KIND, "root": str(folder.resolve()), "classes": classes, "dirs": times}
    write_table(directory, meta, {"label": labels}, {"path": paths})


def read_listing(folder: Path, directory: Path) -> SampleTable | None:
    """The listing of ``folder`` in ``directory`` if it is still true of the tree."""
    table = read_table(directory, numbers_needed=["label"], strings_needed=["path"])
    if table is None or table.meta.get("kind") != KIND:
        return None
    if table.meta.get("root") != str(folder.resolve()):
        return None
    classes, dirs, labels = (
        table.meta.get("classes"),
        table.meta.get("dirs"),
        table.numbers["label"],
    )
    if not isinstance(classes, list) or not all(isinstance(name, str) for name in classes):
        return None
    if len(labels) and not 0 <= int(labels.min()) <= int(labels.max()) < len(classes):
        return None
    if not isinstance(dirs, dict):
        return None
    for relative, saved in dirs.items():
        try:
            if _mtime(folder / relative) != saved:
                return None
        except OSError:
            return None
    return table


# How much a read past a file's size at open asks for at a time.
READ_MORE = 1 << 16


class FolderSource:
    """One split of an ImageFolder tree, read through its listing."""

    kind = KIND

    def __init__(self, folder: Path, table: SampleTable) -> None:
        self.folder = folder
        self.table = table
        self.classes: list[str] = list(table.meta["classes"])

    def __len__(self) -> int:
        return len(self.table)

    def labels(self) -> np.ndarray:
        return self.table.numbers["label"]

    def read(self, index: int) -> bytes:
        """The file's bytes, by ``os`` calls on a string path: ``Path.read_bytes``' path
        object and buffered file took 0.054 ms a file against 0.025 here (a loader worker
        reads one per sample)."""
        # A FIFO or device named like an image is refused, never read (untrusted).
        descriptor = open_regular(os.path.join(self.folder, self.table.string("path", index)))
        try:
            parts = [os.read(descriptor, os.fstat(descriptor).st_size)]
            # Until the end, in case the file grew since its size was read.
            while more := os.read(descriptor, READ_MORE):
                parts.append(more)
        finally:
            os.close(descriptor)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def where(self, index: int) -> str:
        return str(self.folder / self.table.string("path", index))
