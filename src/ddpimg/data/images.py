"""Image datasets on storage, read one sample at a time by index: an ImageFolder tree
(``DIR/train/CLASS/*.jpg``, ``DIR/val/CLASS/*.jpg``) or tar shards in the WebDataset layout
(``DIR/train-*.tar``, ``DIR/val-*.tar``, each sample a ``KEY.jpg`` and a ``KEY.cls``
member). Both list their samples once into a ``SampleTable`` (the index), kept beside the
data (``DIR/.ddpimg-index``) or, where the data is read-only (a squashfs image), in the
run's own directory; later runs read the index instead of listing the data again.

Reading is by random access (a file, or a byte range of a shard), so the order samples are
trained in is the sampler's and never the storage's: which rank reads which sample never
depends on how the data was split into files.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from ddpimg.errors import DataError

SPLITS = ("train", "val")
# The most classes a dataset may have (ImageNet-21k has 21,841): a label is a class number
# below it. A shard names its labels by number, so without the bound a 20 KB file saying
# 100000000 would make 10^8 class names, and a model output as wide.
MAX_CLASSES = 100_000
# torchvision's IMG_EXTENSIONS, compared without case: what ImageFolder takes for an image.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
INDEX_DIR = ".ddpimg-index"
# The most pixels an image may have: PIL's own warning threshold (89.5 Mpx, about 270 MB as
# RGB), here an error naming the sample (PIL only warns below twice that).
MAX_PIXELS = 89_478_485
LAYOUT_HINT = (
    "give an ImageFolder tree (DIR/train/CLASS/*.jpg and DIR/val/CLASS/*.jpg, the ImageNet "
    "layout) or tar shards (DIR/train-*.tar and DIR/val-*.tar, each sample a KEY.jpg and a "
    "KEY.cls member, as `ddpimg data pack` writes them), or --data synthetic"
)


class ImageSource(Protocol):
    """The samples of one split, by index (0 .. len - 1)."""

    #: The class names, in label order.
    classes: list[str]
    #: The storage layout ("imagefolder", "webdataset").
    kind: str

    def __len__(self) -> int: ...

    def labels(self) -> np.ndarray:
        """Every sample's label (int, memory-mapped)."""
        ...

    def read(self, index: int) -> bytes:
        """The encoded image of sample ``index``; OSError when it cannot be read."""
        ...

    def where(self, index: int) -> str:
        """Where sample ``index`` is stored, for messages: a file, or ``shard.tar:member``."""
        ...


def check_pixels(width: int, height: int) -> None:
    """PIL's DecompressionBombError for an image of more than ``MAX_PIXELS``, before it is
    decoded: a header can claim any size, and a 490 KB PNG claiming 13000 x 13000 pixels
    took 2.5 GB to decode."""
    if width * height > MAX_PIXELS:
        from PIL import Image

        raise Image.DecompressionBombError(
            f"the image claims {width} x {height} pixels, more than the {MAX_PIXELS:,} "
            "ddpimg decodes"
        )


def is_image_name(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def detect_layout(root: Path) -> str:
    """``folder`` or ``tar`` for the dataset directory ``root``; DataError naming it when it
    is neither."""
    if not root.is_dir():
        state = "is not a directory" if root.exists() else "does not exist"
        raise DataError(f"--data {root} {state}", hint=LAYOUT_HINT)
    folders = [root / split for split in SPLITS]
    if any(folder.is_dir() for folder in folders):
        missing = [str(folder) for folder in folders if not folder.is_dir()]
        if missing:
            raise DataError(
                f"--data {root}: no {' and no '.join(missing)} directory", hint=LAYOUT_HINT
            )
        return "folder"
    shards = {split: sorted(root.glob(f"{split}-*.tar")) for split in SPLITS}
    if any(shards.values()):
        missing = [f"{root}/{split}-*.tar" for split, found in shards.items() if not found]
        if missing:
            raise DataError(
                f"--data {root}: no shard matches {' or '.join(missing)}", hint=LAYOUT_HINT
            )
        return "tar"
    raise DataError(
        f"--data {root}: neither train/ and val/ directories nor train-*.tar shards",
        hint=LAYOUT_HINT,
    )


def index_dirs(root: Path, fallback: Path) -> tuple[Path, Path]:
    """Where the index of dataset ``root`` is kept: beside the data, or when that cannot be
    written, under ``fallback`` (the run's directory) in a folder named after ``root``'s
    absolute path."""
    name = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return root / INDEX_DIR, fallback / INDEX_DIR / name


def writable_index_dir(root: Path, fallback: Path) -> Path:
    """The first of ``index_dirs`` this process may create or write."""
    beside, elsewhere = index_dirs(root, fallback)
    writable = beside.is_dir() and os.access(beside, os.W_OK)
    if writable or (not beside.exists() and os.access(root, os.W_OK)):
        return beside
    return elsewhere


def find_index(
    root: Path, fallback: Path, split: str, valid: Callable[[Path], bool]
) -> Path | None:
    """The index folder of ``split`` that ``valid`` accepts, beside the data first."""
    for directory in index_dirs(root, fallback):
        if valid(directory / split):
            return directory / split
    return None
