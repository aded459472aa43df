"""Datasets generated for the tests and benchmarks: nothing is ever downloaded.

``make_image_tree`` writes an ImageFolder tree in the ImageNet layout whose images have
mixed sizes and formats (RGB JPEG most of all, PNG, greyscale JPEG, CMYK JPEG), as real
collections do. Each class is a colour and a stripe direction plus noise, so a small model
learns it within a few steps. Generated from a seed: the same call writes the same files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

# (format, mode, file extension) and how often each comes, in 20ths.
FORMATS: Sequence[tuple[str, str, str, int]] = (
    ("JPEG", "RGB", ".jpg", 14),
    ("PNG", "RGB", ".png", 3),
    ("JPEG", "L", ".JPEG", 2),
    ("JPEG", "CMYK", ".jpeg", 1),
)


@dataclass(frozen=True)
class ImageTree:
    root: Path
    classes: list[str]
    train: int
    val: int


def class_names(count: int) -> list[str]:
    """ImageNet-style synset-like names, sorted as ImageFolder sorts them."""
    return [f"n{index:08d}" for index in range(count)]


def image(
    rng: np.random.Generator, label: int, classes: int, width: int, height: int
) -> np.ndarray:
    """A learnable RGB image of class ``label``: its colour, stripes in its direction, noise."""
    hue = label / max(classes, 1)
    colour = np.array([np.cos(2 * np.pi * hue), np.cos(2 * np.pi * (hue + 1 / 3)),
                       np.cos(2 * np.pi * (hue + 2 / 3))])  # fmt: skip
    ys, xs = np.mgrid[0:height, 0:width]
    angle = np.pi * label / max(classes, 1)
    stripes = np.sin((xs * np.cos(angle) + ys * np.sin(angle)) / 4.0)
    pixels = 128 + 60 * colour[None, None, :] + 40 * stripes[..., None]
    pixels = pixels + rng.normal(0, 25, (height, width, 3))
    clipped: np.ndarray = np.clip(pixels, 0, 255).astype(np.uint8)
    return clipped


def make_image_tree(
    root: Path,
    *,
    classes: int = 10,
    train_per_class: int = 20,
    val_per_class: int = 5,
    sizes: tuple[int, int] = (40, 120),
    seed: int = 0,
) -> ImageTree:
    """Write ``root/train/CLASS/*`` and ``root/val/CLASS/*``; image sides are drawn from
    ``sizes`` (inclusive range), formats from ``FORMATS``."""
    rng = np.random.default_rng(seed)
    names = class_names(classes)
    weights = np.array([share for *_, share in FORMATS], dtype=float)
    weights /= weights.sum()
    for split, per_class in (("train", train_per_class), ("val", val_per_class)):
        for label, name in enumerate(names):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(per_class):
                width, height = (int(v) for v in rng.integers(sizes[0], sizes[1] + 1, size=2))
                kind, mode, extension, _ = FORMATS[int(rng.choice(len(FORMATS), p=weights))]
                picture = Image.fromarray(image(rng, label, classes, width, height))
                if mode != "RGB":
                    picture = picture.convert(mode)
                picture.save(folder / f"{name}_{index:05d}{extension}", kind, quality=90)
    return ImageTree(root, names, classes * train_per_class, classes * val_per_class)


def write_shards(tree: Path, out: Path, per_shard: int) -> dict[str, list[Path]]:
    """Tar shards of an ImageFolder tree as WebDataset tools write them (``KEY.ext`` +
    ``KEY.cls``, no index), ``per_shard`` samples each, in the tree's sorted order."""
    import io
    import tarfile

    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, list[Path]] = {}
    classes = sorted(entry.name for entry in (tree / "train").iterdir() if entry.is_dir())
    for split in ("train", "val"):
        files = [
            (path, label)
            for label, name in enumerate(classes)
            for path in sorted((tree / split / name).iterdir())
        ]
        written[split] = []
        for shard, start in enumerate(range(0, len(files), per_shard)):
            path = out / f"{split}-{shard:06d}.tar"
            with tarfile.open(path, "w") as tar:
                for offset, (source, label) in enumerate(files[start : start + per_shard]):
                    key = f"{split}{start + offset:07d}"
                    members = [
                        (f"{key}{source.suffix.lower()}", source.read_bytes()),
                        (f"{key}.cls", str(label).encode()),
                    ]
                    for name, data in members:
                        info = tarfile.TarInfo(name)
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
            written[split].append(path)
    return written


def markov_tokens(count: int, vocab: int, seed: int = 0, successors: int = 4) -> np.ndarray:
    """``count`` tokens of random walks (of 1024 tokens, walked side by side) in which every
    token has ``successors`` possible next tokens: a corpus a small model learns within a
    few steps (int64)."""
    rng = np.random.default_rng(seed)
    table = rng.integers(0, vocab, size=(vocab, successors))
    length = 1024
    walks = np.empty((length, -(-count // length)), dtype=np.int64)
    walks[0] = rng.integers(0, vocab, size=walks.shape[1])
    for position in range(1, length):
        choice = rng.integers(0, successors, size=walks.shape[1])
        walks[position] = table[walks[position - 1], choice]
    return walks.T.reshape(-1)[:count].copy()


def write_token_corpus(
    root: Path,
    *,
    train_tokens: int,
    val_tokens: int,
    shard_tokens: int,
    kind: str = "llm.c v1",
    vocab: int = 50257,
    seed: int = 0,
) -> dict[str, list[Path]]:
    """A corpus of token shards as llm.c (``kind`` "llm.c v1" / "llm.c v7": header + uint16 /
    uint32, NAME_val_NNNNNN.bin first, then NAME_train_NNNNNN.bin) or nanoGPT ("nanoGPT":
    train.bin and val.bin, no header) write them, from ``markov_tokens``."""
    from ddpimg.data.tokenshards import LLMC_V1, LLMC_V7, write_llmc_shard

    root.mkdir(parents=True, exist_ok=True)
    tokens = markov_tokens(train_tokens + val_tokens, vocab, seed)
    parts = {"val": tokens[:val_tokens], "train": tokens[val_tokens:]}
    written: dict[str, list[Path]] = {"val": [], "train": []}
    for split, part in parts.items():
        if kind == "nanoGPT":
            path = root / f"{split}.bin"
            part.astype("<u2").tofile(path)
            written[split].append(path)
            continue
        shard_format = {"llm.c v1": LLMC_V1, "llm.c v7": LLMC_V7}[kind]
        for number, first in enumerate(range(0, len(part), shard_tokens)):
            path = root / f"corpus_{split}_{number:06d}.bin"
            write_llmc_shard(path, part[first : first + shard_tokens], shard_format)
            written[split].append(path)
    return written


def data_gym_bytes() -> dict[int, str]:
    """GPT-2's byte -> printable character table of its encoding files (``bytes_to_unicode``
    of its encoder.py): printable bytes but space stand for themselves, the others for
    characters from U+0100 on."""
    order = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    table = {b: chr(b) for b in order}
    shifted = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


def byte_rank_order() -> list[int]:
    """The ranks GPT-2's encoding gives single bytes: printable ones first (tiktoken's
    ``data_gym_to_mergeable_bpe_ranks``)."""
    order = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    return order + [b for b in range(256) if b not in order]


SMALL_MERGES = (("t", "h"), ("th", "e"), (" ", "the"), ("a", "n"), ("an", "d"), (" ", "and"))


def write_small_encoding(
    directory: Path, merges: Sequence[tuple[str, str]] = SMALL_MERGES
) -> dict[bytes, int]:
    """A GPT-2-style BPE of 256 bytes and ``merges``, as GPT-2's release files
    (``vocab.bpe``, ``encoder.json``); returns its mergeable ranks (what tiktoken takes)."""
    import json

    table = data_gym_bytes()
    ranks = {bytes([b]): rank for rank, b in enumerate(byte_rank_order())}
    lines = []
    for first, second in merges:
        ranks[first.encode() + second.encode()] = len(ranks)
        lines.append(
            "".join(table[b] for b in first.encode()) + " "
            + "".join(table[b] for b in second.encode())
        )  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.bpe").write_text("#version: 0.2\n" + "\n".join(lines) + "\n")
    encoder = {"".join(table[b] for b in token): rank for token, rank in ranks.items()}
    encoder["<|endoftext|>"] = len(ranks)
    (directory / "encoder.json").write_text(json.dumps(encoder))
    return ranks
