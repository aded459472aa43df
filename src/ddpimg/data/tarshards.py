"""Tar shards in the WebDataset layout, read by random access.

A split is the shards ``ROOT/SPLIT-*.tar`` in name order. A sample is a group of members
sharing a key, WebDataset's rule: the member name up to the first dot of its last path
component is the key, the rest the extension. ddpimg reads one image member (any of
``IMAGE_EXTENSIONS``) and the ``cls`` member (the label, a decimal integer) of each key;
other members are ignored. ``ROOT/dataset.json`` (written by ``ddpimg data pack``) names the
classes; without it they are named by their numbers.

The index (a ``SampleTable``: shard number, byte offset and size of the image member, label,
member name) is built by reading the tar headers once (``tarheaders``), which skips the
image data and so costs little I/O. It remembers every shard's name, size and
modification time (whole seconds), and is rebuilt when they change. A sample is then one
``pread`` of its byte range: no sequential pass over the shards, and the sampler, not the
shard layout, decides the order.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from pathlib import Path

import numpy as np

from ddpimg.data.images import IMAGE_EXTENSIONS, MAX_CLASSES
from ddpimg.data.table import SampleTable, read_table, write_table
from ddpimg.data.tarheaders import TarFormatError, members
from ddpimg.errors import DataError, printable
from ddpimg.untrusted import MIB, BadInput, open_regular, read_json

KIND = "webdataset"
DATASET_FILE = "dataset.json"
DATASET_FILE_LIMIT = 16 * MIB  # MAX_CLASSES names of up to about 160 bytes
LABEL_EXTENSION = "cls"
# Shard files kept open per process; older ones are closed first (the limit on open files
# is often 1024).
OPEN_SHARDS = 128
# The numeric columns of the index.
COLUMNS = ("shard", "offset", "size", "label")
# The longest label member read: a class number (with whitespace around it).
LABEL_BYTES = 32
_KEY = re.compile(r"^((?:.*/|)[^./]+)[.]([^/]*)$")
_IMAGE_EXTENSIONS = frozenset(extension.lstrip(".") for extension in IMAGE_EXTENSIONS)
TAR_HINT = (
    "each sample needs an image member (KEY.jpg, .png, ...) and a label member KEY.cls "
    "holding the class number; `ddpimg data pack` writes shards that way"
)


def shard_paths(root: Path, split: str) -> list[Path]:
    return sorted(root.glob(f"{split}-*.tar"))


def split_member(name: str) -> tuple[str, str] | None:
    """(key, extension) of a member name by WebDataset's rule; None without an extension."""
    match = _KEY.match(name)
    return (match.group(1), match.group(2)) if match else None


def scan_shard(path: Path) -> list[tuple[str, int, int, int]]:
    """The samples of one shard in member order: (image member, data offset, size, label);
    DataError naming the shard and the key for a sample without image or label."""
    images: dict[str, tuple[str, int, int]] = {}
    labels: dict[str, int] = {}
    try:
        descriptor = open_regular(path)  # a FIFO named like a shard would never answer
    except OSError as err:
        raise DataError(f"--data: {path} cannot be opened ({err.strerror})", hint=TAR_HINT) from err
    except BadInput as err:
        raise DataError(f"--data: {printable(str(path))} is {err}", hint=TAR_HINT) from err
    try:
        for member in members(descriptor, os.fstat(descriptor).st_size):
            parts = split_member(member.name) if member.is_file else None
            if parts is None:
                continue
            key, extension = parts
            if extension.lower() in _IMAGE_EXTENSIONS and key not in images:
                images[key] = (member.name, member.offset, member.size)
            elif extension == LABEL_EXTENSION:
                # A class number is a few digits: a larger member is not one, and is not
                # read whole.
                text = os.pread(descriptor, min(member.size, LABEL_BYTES + 1), member.offset)
                labels[key] = _label(text, f"{path}:{member.name}")
    except TarFormatError as err:
        raise DataError(
            f"--data: {path} cannot be read as a tar file ({err})",
            hint="the shard is damaged or incomplete; pack it again (`ddpimg data pack` "
            "resumes and rewrites only missing shards)",
        ) from err
    finally:
        os.close(descriptor)
    samples = []
    for key, (name, offset, size) in images.items():
        if key not in labels:
            message = f"--data: {path}: sample {key!r} has no {key}.cls member"
            raise DataError(message, hint=TAR_HINT)
        samples.append((name, offset, size, labels[key]))
    return samples


def _label(data: bytes, where: str) -> int:
    text = data.decode("utf-8", "replace").strip()
    # isdigit alone also takes digits int() does not read, such as "²".
    if not (text.isascii() and text.isdigit()) or len(data) > LABEL_BYTES:
        raise DataError(
            f"--data: {printable(where)} holds {text[:20]!r}, not a class number", hint=TAR_HINT
        )
    if int(text) >= MAX_CLASSES:
        raise DataError(
            f"--data: {printable(where)} holds {text}, a class number above "
            f"{MAX_CLASSES - 1:,} (a dataset has at most {MAX_CLASSES:,} classes)",
            hint=TAR_HINT,
        )
    return int(text)


def _shard_facts(paths: list[Path]) -> list[list[str | int]]:
    facts: list[list[str | int]] = []
    for path in paths:
        stat = os.stat(path)
        # Whole seconds: what copies (cp -p, rsync, tar) and squashfs images keep.
        facts.append([path.name, stat.st_size, int(stat.st_mtime)])
    return facts


def write_index(root: Path, split: str, directory: Path) -> None:
    """Scan the shards of ``split`` and write their index to ``directory``."""
    paths = shard_paths(root, split)
    shard, offset, size, label, names = [], [], [], [], []
    for number, path in enumerate(paths):
        for name, data_offset, data_size, sample_label in scan_shard(path):
            shard.append(number)
            offset.append(data_offset)
            size.append(data_size)
            label.append(sample_label)
            names.append(name)
    numbers: dict[str, np.ndarray] = {
        "shard": np.asarray(shard, dtype=np.int32),
        "offset": np.asarray(offset, dtype=np.int64),
        "size": np.asarray(size, dtype=np.int64),
        "label": np.asarray(label, dtype=np.int32),
    }
    meta = {"kind": KIND, "root": str(root.resolve()), "shards": _shard_facts(paths)}
    write_table(directory, meta, numbers, {"member": names})


def read_index(root: Path, split: str, directory: Path) -> SampleTable | None:
    """The index of ``split`` in ``directory`` if it still describes the shards."""
    table = read_table(directory, numbers_needed=COLUMNS, strings_needed=["member"])
    if table is None or table.meta.get("kind") != KIND:
        return None
    try:
        current = _shard_facts(shard_paths(root, split))
    except OSError:
        return None
    if table.meta.get("shards") != current:
        return None
    return table if _within_shards(table, [int(size) for _, size, _ in current]) else None


def _within_shards(table: SampleTable, sizes: list[int]) -> bool:
    """Whether every sample's byte range lies inside its shard, and its label is a class
    number."""
    numbers = table.numbers
    if not len(table):
        return True
    shard, offset, size = numbers["shard"], numbers["offset"], numbers["size"]
    if int(shard.min()) < 0 or int(shard.max()) >= len(sizes):
        return False
    if not 0 <= int(numbers["label"].min()) <= int(numbers["label"].max()) < MAX_CLASSES:
        return False
    ends = np.asarray(sizes, dtype=np.int64)[shard]
    return bool(np.all((offset >= 0) & (size >= 0) & (offset + size <= ends)))


def dataset_classes(root: Path, label_count: int) -> list[str]:
    """The class names: ``dataset.json``'s, or the numbers 0 .. ``label_count`` - 1."""
    path = root / DATASET_FILE
    if not path.exists():
        return [str(label) for label in range(label_count)]
    try:
        classes = read_json(path, DATASET_FILE_LIMIT)["classes"]
        if not isinstance(classes, list) or not all(isinstance(name, str) for name in classes):
            raise BadInput("'classes' is not a list of names")
        if len(classes) > MAX_CLASSES:
            raise BadInput(f"{len(classes):,} classes, more than {MAX_CLASSES:,}")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(
            f"--data: {path} has no readable 'classes' list ({err})",
            hint='rewrite it as {"classes": ["name", ...]} or remove it',
        ) from err
    if len(classes) < label_count:
        raise DataError(
            f"--data: {path} names {len(classes)} classes, but the shards use labels up to "
            f"{label_count - 1}",
            hint=f"list every class in {DATASET_FILE}, or remove it to number them",
        )
    return list(classes)


class TarSource:
    """One split of a shard set, read through its index."""

    kind = KIND

    def __init__(self, root: Path, table: SampleTable, classes: list[str]) -> None:
        self.paths = [root / str(name) for name, _, _ in table.meta["shards"]]
        self.table = table
        self.classes = classes
        # Opened lazily in each process; a descriptor inherited through fork is only used
        # with pread, which keeps no file position, so sharing it is safe.
        self._open: OrderedDict[int, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self.table)

    def labels(self) -> np.ndarray:
        return self.table.numbers["label"]

    def read(self, index: int) -> bytes:
        numbers = self.table.numbers
        shard = int(numbers["shard"][index])
        size = int(numbers["size"][index])
        data = os.pread(self._descriptor(shard), size, int(numbers["offset"][index]))
        if len(data) != size:
            raise OSError(f"{self.paths[shard]} ends {size - len(data)} bytes into the member")
        return data

    def where(self, index: int) -> str:
        shard = int(self.table.numbers["shard"][index])
        return f"{self.paths[shard]}:{self.table.string('member', index)}"

    def _descriptor(self, shard: int) -> int:
        descriptor = self._open.get(shard)
        if descriptor is not None:
            self._open.move_to_end(shard)
            return descriptor
        if len(self._open) >= OPEN_SHARDS:
            _, oldest = self._open.popitem(last=False)
            os.close(oldest)
        descriptor = open_regular(self.paths[shard])
        self._open[shard] = descriptor
        return descriptor
