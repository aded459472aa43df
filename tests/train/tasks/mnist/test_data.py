from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch

from ddpimg.errors import DataError
from ddpimg.train.tasks.mnist.data import (
    IMAGES_MAGIC,
    LABELS_MAGIC,
    MEAN,
    STD,
    find_raw_dir,
    load_mnist,
    normalize,
    read_idx,
    read_split,
    synthetic_images,
)


def idx_bytes(magic: int, dims: tuple[int, ...], payload: bytes) -> bytes:
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims)
    return header + payload


def write_idx(path: Path, magic: int, dims: tuple[int, ...], payload: bytes) -> Path:
    content = idx_bytes(magic, dims, payload)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(content) if path.suffix == ".gz" else content)
    return path


def write_split(raw: Path, prefix: str, count: int, suffix: str = "") -> None:
    images = bytes(i % 256 for i in range(count * 28 * 28))
    labels = bytes(i % 10 for i in range(count))
    write_idx(raw / f"{prefix}-images-idx3-ubyte{suffix}", IMAGES_MAGIC, (count, 28, 28), images)
    write_idx(raw / f"{prefix}-labels-idx1-ubyte{suffix}", LABELS_MAGIC, (count,), labels)


def write_mnist(raw: Path, suffix: str = "") -> None:
    write_split(raw, "train", 5, suffix)
    write_split(raw, "t10k", 3, suffix)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_reads_torchvision_layout(tmp_path: Path, suffix: str) -> None:
    write_mnist(tmp_path / "MNIST" / "raw", suffix)
    data = load_mnist(str(tmp_path), None, None)
    assert data.train.images.shape == (5, 28, 28)
    assert data.train.images.dtype == torch.uint8
    assert data.train.images[0, 0, :3].tolist() == [0, 1, 2]
    assert data.train.labels.tolist() == [0, 1, 2, 3, 4]
    assert data.train.labels.dtype == torch.int64
    assert len(data.test) == 3
    assert data.source == str(tmp_path / "MNIST" / "raw")


@pytest.mark.parametrize("layout", ["MNIST/raw", "raw", "."])
def test_finds_raw_dir(tmp_path: Path, layout: str) -> None:
    write_mnist(tmp_path / layout)
    assert find_raw_dir(tmp_path) == tmp_path / layout


def test_sample_limits_take_the_first_samples(tmp_path: Path) -> None:
    write_mnist(tmp_path)
    data = load_mnist(str(tmp_path), 2, 1)
    assert data.train.labels.tolist() == [0, 1]
    assert len(data.test) == 1


def test_sample_limit_above_the_set_is_an_error(tmp_path: Path) -> None:
    write_mnist(tmp_path)
    with pytest.raises(
        DataError, match=rf"--train-samples 6 is more than the 5 training samples in {tmp_path}"
    ):
        load_mnist(str(tmp_path), 6, None)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=rf"--data {tmp_path}/nope does not exist\n  hint: use"):
        load_mnist(str(tmp_path / "nope"), None, None)


def test_data_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(DataError, match=r"/f is not a directory"):
        load_mnist(str(tmp_path / "f"), None, None)


def test_no_idx_files_lists_where_it_looked(tmp_path: Path) -> None:
    message = (
        rf"--data {tmp_path}: no MNIST idx files found; looked for "
        rf"{tmp_path}/MNIST/raw/train-images-idx3-ubyte\[.gz\], "
        rf"{tmp_path}/raw/train-images-idx3-ubyte\[.gz\], "
        rf"{tmp_path}/train-images-idx3-ubyte\[.gz\]\n"
        r"  hint: use --data synthetic, or download MNIST"
    )
    with pytest.raises(DataError, match=message):
        load_mnist(str(tmp_path), None, None)


def test_missing_file_is_named(tmp_path: Path) -> None:
    write_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(
        DataError, match=rf"MNIST file\(s\) missing: {tmp_path}/t10k-labels-idx1-ubyte\[.gz\]"
    ):
        read_split(tmp_path, "test")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x00\x00\x08", r"3 bytes, expected at least the 16-byte idx header"),
        (
            idx_bytes(LABELS_MAGIC, (1, 28, 28), bytes(784)),
            r"bad idx magic 0x00000801, expected 0x00000803",
        ),
        (idx_bytes(IMAGES_MAGIC, (1, 28, 27), bytes(756)), r"items of shape \(28, 27\), expected"),
        (
            idx_bytes(IMAGES_MAGIC, (2, 28, 28), bytes(784)),
            r"800 bytes, expected 1584 for 2 items of shape \(28, 28\)\n  hint: the file is "
            r"truncated",
        ),
        (idx_bytes(IMAGES_MAGIC, (1, 28, 28), bytes(785)), r"801 bytes, expected 800 for 1 items"),
    ],
)
def test_corrupt_idx_names_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(content)
    with pytest.raises(DataError, match=rf"{path}: {message}"):
        read_idx(path, IMAGES_MAGIC, (28, 28))


def test_empty_idx_file_reads_as_no_items(tmp_path: Path) -> None:
    path = write_idx(tmp_path / "labels", LABELS_MAGIC, (0,), b"")
    assert read_idx(path, LABELS_MAGIC, ()).shape == (0,)


def test_corrupt_gzip(tmp_path: Path) -> None:
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(bytes(1000))[:20])
    with pytest.raises(DataError, match=rf"{path}: not a readable gzip file"):
        read_idx(path, IMAGES_MAGIC, (28, 28))


def test_image_and_label_counts_must_match(tmp_path: Path) -> None:
    write_mnist(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", LABELS_MAGIC, (4,), bytes(4))
    with pytest.raises(DataError, match=r"holds 5 images but .*train-labels-idx1-ubyte holds 4"):
        read_split(tmp_path, "train")


def test_labels_must_be_digits(tmp_path: Path) -> None:
    write_mnist(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", LABELS_MAGIC, (5,), bytes([0, 1, 12, 3, 4]))
    with pytest.raises(DataError, match=r"train-labels-idx1-ubyte: label 12 found, expected"):
        read_split(tmp_path, "train")


def test_synthetic_is_deterministic_and_prefix_stable() -> None:
    full = synthetic_images("train", 2500)
    again = synthetic_images("train", 2500)
    head = synthetic_images("train", 1200)
    assert torch.equal(full.images, again.images)
    assert torch.equal(full.labels, again.labels)
    assert torch.equal(head.images, full.images[:1200])
    assert torch.equal(head.labels, full.labels[:1200])
    assert full.images.shape == (2500, 28, 28)
    assert full.images.dtype == torch.uint8
    assert sorted(torch.unique(full.labels).tolist()) == list(range(10))


def test_synthetic_train_and_test_differ() -> None:
    assert not torch.equal(
        synthetic_images("train", 100).images, synthetic_images("test", 100).images
    )


def test_synthetic_default_sizes_are_mnists() -> None:
    data = load_mnist("synthetic", None, 10)
    assert (len(data.train), len(data.test)) == (60_000, 10)


def test_normalize_uses_mnist_statistics() -> None:
    images = torch.tensor([[[0, 255]]], dtype=torch.uint8)
    out = normalize(images)
    assert out.shape == (1, 1, 1, 2)
    expected = [(0 - MEAN) / STD, (1 - MEAN) / STD]
    assert out.flatten().tolist() == pytest.approx(expected)


def test_batch_gathers_rows(tmp_path: Path) -> None:
    write_mnist(tmp_path)
    train = load_mnist(str(tmp_path), None, None).train
    inputs, targets = train.batch(torch.tensor([3, 1]))
    assert inputs.shape == (2, 1, 28, 28)
    assert targets.tolist() == [3, 1]


def test_a_gzip_that_expands_beyond_any_mnist_file_is_refused(tmp_path: Path) -> None:
    """100 KB of gzip expanding to 100 MiB: read whole before, now at most 64 MiB + 1 byte
    is decompressed (tracemalloc's peak stays below what the whole would take)."""
    import tracemalloc

    path = tmp_path / "train-images-idx3-ubyte.gz"
    with gzip.open(path, "wb", compresslevel=1) as stream:
        for _ in range(100):
            stream.write(bytes(1 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match=r"more than the 64 MiB such a file may have"):
            read_idx(path, IMAGES_MAGIC, (28, 28))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 << 20, peak


def test_a_fifo_in_place_of_an_idx_file_is_refused_unopened(tmp_path: Path) -> None:
    import os

    path = tmp_path / "train-labels-idx1-ubyte"
    os.mkfifo(path)
    with pytest.raises(DataError, match=r"it is a FIFO \(named pipe\), not a regular file"):
        read_idx(path, LABELS_MAGIC, ())
