"""``ddpimg data pack SRC DST``: an ImageFolder tree as tar shards in the WebDataset layout,
with their index, ready for ``train resnet --data DST``.

Why: clusters' parallel file systems punish many small files (CSC's scratch quota is a
million files; ImageNet's training split alone has 1.28M), and their guides say to pack
datasets or put them in a squashfs image. Shards of about ``--shard-mb`` MB (or
``--shard-samples`` samples) hold each sample as ``KEY.<ext>`` and ``KEY.cls`` members,
in the tree's sorted order, so sample i of the shards is sample i of the tree: a run may
move from one to the other with the same trajectory. ``--max-side PX`` re-encodes images
whose longer side exceeds PX as JPEG (FFCV keeps 500 px for ImageNet), which cuts the
bytes read per sample; smaller ones are copied byte for byte, as is every image without
``--max-side``.

Shards are written by ``--workers`` processes, each shard under a temporary name and
renamed when complete; ``pack.json`` records the plan. Run again after an interruption: the
same plan resumes, and only missing shards are written. At the end ``dataset.json`` (the
class names) and the index (``.ddpimg-index/``) are written, and the ``mksquashfs`` line
that makes one read-only image of it all is printed.
"""

from __future__ import annotations

import io
import math
import multiprocessing
import os
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from PIL import Image

from ddpimg.data import tarshards
from ddpimg.data.imagefolder import folder_classes, list_split
from ddpimg.data.images import INDEX_DIR, SPLITS, check_pixels
from ddpimg.errors import DataError, printable
from ddpimg.fsio import fsync_path, write_json_atomic
from ddpimg.progress_bar import ProgressBar
from ddpimg.untrusted import MIB, BadInput, read_bytes, read_json

PLAN_FILE = "pack.json"
PLAN_LIMIT = MIB  # a few hundred bytes
# The largest image file packed: far above any photograph, a bound on what one read takes.
MAX_IMAGE_BYTES = 256 * MIB
DEFAULT_SHARD_MB = 1024.0
DEFAULT_QUALITY = 90
MAX_QUALITY = 100  # the top of the JPEG quality scale Pillow takes
# Files whose size (or, with --max-side, re-encoded size) estimates a shard's sample count.
SIZE_SAMPLE = 200
_TAR_HEADERS = 2 * 512 + 2 * 512  # two members, a header block and about half a padding block each
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError)


@dataclass(frozen=True)
class PackOptions:
    shard_samples: int | None = None
    shard_mb: float = DEFAULT_SHARD_MB
    max_side: int | None = None
    quality: int = DEFAULT_QUALITY
    workers: int = 1


def check_request(source: Path, target: Path, options: PackOptions) -> None:
    """DataError naming the flag or path when the request cannot be packed as asked: shards
    written into the tree being read (listed again by a later run, or by this one), or a
    shard size or JPEG quality out of range."""
    tree, shards = source.resolve(), target.resolve()
    if shards == tree or tree in shards.parents:
        where = "SRC" if shards == tree else "inside SRC"
        raise DataError(
            f"data pack: DST {target} is {where} {source}: the shards would be written into "
            "the image tree being packed",
            hint="give a DST outside SRC, e.g. a sibling directory",
        )
    if not (math.isfinite(options.shard_mb) and options.shard_mb > 0):
        raise DataError(
            f"--shard-mb must be a positive number of MB, got {options.shard_mb}",
            hint=f"leave it out for about {DEFAULT_SHARD_MB:g} MB a shard, or give "
            "--shard-samples N",
        )
    if not 1 <= options.quality <= MAX_QUALITY:
        raise DataError(
            f"--quality must be from 1 to {MAX_QUALITY}, got {options.quality}",
            hint=f"JPEG quality as Pillow takes it; the default is {DEFAULT_QUALITY}",
        )


@dataclass(frozen=True)
class Shard:
    """Samples ``first`` .. ``first + count`` of a split's listing."""

    split: str
    number: int
    first: int
    count: int

    @property
    def name(self) -> str:
        return f"{self.split}-{self.number:06d}.tar"


@dataclass(frozen=True)
class PackResult:
    samples: dict[str, int]
    shards: dict[str, int]
    written: int  # shards written by this run (the others were there already)
    unchanged: int  # images --max-side could not decode, copied as they were
    bytes: int


def encode(
    data: bytes, extension: str, max_side: int | None, quality: int
) -> tuple[bytes, str, bool]:
    """The bytes and extension a sample is stored with, and whether a re-encoding was asked
    for but the image could not be decoded (then it is stored as it was)."""
    if max_side is None:
        return data, extension, False
    try:
        with Image.open(io.BytesIO(data)) as image:
            check_pixels(*image.size)
            if max(image.size) <= max_side:
                return data, extension, False
            # A JPEG is decoded at the smallest scale still at least max_side wide.
            image.draft("RGB", (max_side, max_side))
            picture = image.convert("RGB")
            picture.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
            stream = io.BytesIO()
            picture.save(stream, "JPEG", quality=quality)
            return stream.getvalue(), "jpg", False
    except _DECODE_ERRORS:
        return data, extension, True


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0  # the same tree packs to the same bytes
    tar.addfile(info, io.BytesIO(data))


def write_shard(
    job: tuple[Path, Path, Shard, list[str], list[int], int | None, int],
) -> tuple[int, int]:
    """Write one shard (in a worker process); (samples, images copied unchanged)."""
    folder, target, shard, paths, labels, max_side, quality = job
    final = target / shard.name
    temporary = target / f".{shard.name}.{os.getpid()}.tmp"
    unchanged = 0
    try:
        with tarfile.open(temporary, "w", format=tarfile.USTAR_FORMAT) as tar:
            for offset, (relative, label) in enumerate(zip(paths, labels, strict=True)):
                key = f"{shard.first + offset:09d}"
                source = folder / relative
                data = _read_image(source)
                extension = source.suffix.lower().lstrip(".")
                stored, extension, failed = encode(data, extension, max_side, quality)
                unchanged += failed
                _add(tar, f"{key}.{extension}", stored)
                _add(tar, f"{key}.{tarshards.LABEL_EXTENSION}", str(label).encode())
        fsync_path(temporary)
        temporary.rename(final)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return shard.count, unchanged


def _read_image(source: Path) -> bytes:
    """The bytes of the image file ``source``; a DataError naming it when it cannot be read
    (a FIFO, a file over MAX_IMAGE_BYTES, no permission)."""
    try:
        return read_bytes(source, MAX_IMAGE_BYTES)
    except (OSError, BadInput) as err:
        why = f"({err.strerror})" if isinstance(err, OSError) else f"it is {err}"
        raise DataError(
            f"{printable(str(source))} cannot be read: {why}",
            hint="fix its permissions or remove it, then run the same command again",
        ) from err


def samples_per_shard(folder: Path, paths: list[str], options: PackOptions) -> int:
    """``--shard-samples``, or as many samples as make about ``--shard-mb`` MB, from the
    mean stored size of samples spread over the listing."""
    if options.shard_samples:
        return options.shard_samples
    step = max(len(paths) // SIZE_SAMPLE, 1)
    sizes = []
    for relative in paths[::step][:SIZE_SAMPLE]:
        path = folder / relative
        if options.max_side is None:
            sizes.append(path.stat().st_size)
        else:
            stored, _, _ = encode(_read_image(path), "", options.max_side, options.quality)
            sizes.append(len(stored))
    mean = sum(sizes) / len(sizes) if sizes else 1.0
    return max(1, round(options.shard_mb * 1e6 / (mean + _TAR_HEADERS)))


def _check_plan(target: Path, plan: dict[str, Any]) -> None:
    """Write ``pack.json``, or check the one an interrupted run left says the same."""
    path = target / PLAN_FILE
    if path.exists():
        try:
            existing = read_json(path, PLAN_LIMIT)
        except (OSError, ValueError) as err:
            raise DataError(
                f"{path} cannot be read ({err})", hint="remove it and pack again"
            ) from err
        differing = sorted(k for k in plan if existing.get(k) != plan[k])
        if differing:
            raise DataError(
                f"{target} holds a pack of other options or another tree ({', '.join(differing)} "
                f"differ from {PLAN_FILE})",
                hint="pack into another directory, or run with the options it was started with",
            )
        return
    write_json_atomic(path, plan)


def pack(source: Path, target: Path, options: PackOptions, stream: TextIO) -> PackResult:
    """Pack ``source`` (with train/ and val/) into ``target``, reporting on ``stream``."""
    check_request(source, target, options)
    classes = folder_classes(source)
    listings = {split: list_split(source / split, classes)[:2] for split in SPLITS}
    per_shard = samples_per_shard(source / "train", listings["train"][0], options)
    shards = [
        Shard(split, number, first, min(per_shard, len(paths) - first))
        for split, (paths, _) in listings.items()
        for number, first in enumerate(range(0, len(paths), per_shard))
    ]
    target.mkdir(parents=True, exist_ok=True)
    for leftover in target.glob(".*.tar.*.tmp"):
        leftover.unlink()
    samples = {split: len(paths) for split, (paths, _) in listings.items()}
    plan = {
        "source": str(source.resolve()),
        "classes": classes,
        "samples": samples,
        "samples_per_shard": per_shard,
        "max_side": options.max_side,
        "quality": options.quality if options.max_side else None,
    }
    _check_plan(target, plan)
    todo = [shard for shard in shards if not (target / shard.name).exists()]
    total = sum(shard.count for shard in shards)
    progress = ProgressBar(
        "packing", total, "images", stream, done=total - sum(s.count for s in todo)
    )
    jobs = [
        (
            source / shard.split,
            target,
            shard,
            listings[shard.split][0][shard.first : shard.first + shard.count],
            listings[shard.split][1][shard.first : shard.first + shard.count].tolist(),
            options.max_side,
            options.quality,
        )
        for shard in todo
    ]
    unchanged = 0
    began = time.monotonic()
    with multiprocessing.get_context("fork").Pool(max(options.workers, 1)) as pool:
        for count, failed in pool.imap_unordered(write_shard, jobs):
            unchanged += failed
            progress.advance(count)
    progress.close()
    write_json_atomic(target / tarshards.DATASET_FILE, {"classes": classes})
    for split in SPLITS:
        tarshards.write_index(target, split, target / INDEX_DIR / split)
    size = sum((target / shard.name).stat().st_size for shard in shards)
    if todo:
        print(
            f"ddpimg: packed {len(todo)} shard(s) in {time.monotonic() - began:.0f} s", file=stream
        )
    return PackResult(
        samples=samples,
        shards={split: sum(1 for s in shards if s.split == split) for split in SPLITS},
        written=len(todo),
        unchanged=unchanged,
        bytes=size,
    )


def describe(result: PackResult, target: Path) -> str:
    """What ``ddpimg data pack`` prints at the end: the counts, and how to use the shards."""
    counts = ", ".join(
        f"{split} {result.samples[split]:,} samples in {result.shards[split]} shards"
        for split in SPLITS
    )
    size = f"{result.bytes / 1e9:.2f} GB" if result.bytes >= 1e9 else f"{result.bytes / 1e6:.1f} MB"
    lines = [
        f"{target}: {counts}, {size}",
        f"train on it:   train resnet --data {target}",
        # LUMI's and CSC's guides: one squashfs file instead of many, bound into the container.
        f"one file:      mksquashfs {target} {target}.sqsh  (then bind it: "
        f"--bind {target}.sqsh:/data:image-src=/ and --data /data)",
    ]
    if result.unchanged:
        lines.append(
            f"note: {result.unchanged} image(s) could not be decoded to re-encode them and were "
            "stored as they are; training reports them (--bad-samples)"
        )
    return "\n".join(lines)
