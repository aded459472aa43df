from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ddpimg.data.tokenshards import (
    HEADER_BYTES,
    LLMC_V1,
    LLMC_V7,
    NANOGPT,
    WindowReader,
    declared_vocabulary,
    inspect_shard,
    is_validation,
    open_splits,
    resolve_files,
    scan_max_token,
    write_llmc_shard,
)
from ddpimg.errors import DataError
from tests.datagen import write_token_corpus


@pytest.mark.parametrize(
    ("kind", "expected", "itemsize"),
    [("llm.c v1", LLMC_V1, 2), ("llm.c v7", LLMC_V7, 4), ("nanoGPT", NANOGPT, 2)],
)
def test_each_format_is_recognised_with_its_token_count(
    tmp_path: Path, kind: str, expected: object, itemsize: int
) -> None:
    written = write_token_corpus(
        tmp_path, train_tokens=1000, val_tokens=300, shard_tokens=600, kind=kind
    )
    shard = inspect_shard(written["train"][0])
    assert shard.format == expected
    assert shard.tokens == (1000 if kind == "nanoGPT" else 600)
    header = 0 if kind == "nanoGPT" else HEADER_BYTES
    assert written["train"][0].stat().st_size == header + shard.tokens * itemsize


def test_the_header_is_llm_cs(tmp_path: Path) -> None:
    path = tmp_path / "x_train_000000.bin"
    write_llmc_shard(path, np.arange(5), LLMC_V7)
    header = np.fromfile(path, dtype="<i4", count=256)
    assert header[:3].tolist() == [20240801, 7, 5]
    assert not header[3:].any()
    assert np.fromfile(path, dtype="<u4", offset=HEADER_BYTES).tolist() == [0, 1, 2, 3, 4]


def _header(magic: int, version: int, count: int) -> bytes:
    header = np.zeros(256, dtype="<i4")
    header[:3] = (magic, version, count)
    return header.tobytes()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            _header(20240520, 1, 10) + b"\0" * 12,
            r"bad\.bin: the llm.c header says 10 tokens \(1044 bytes in all\), the file has 1036 "
            r"bytes \(truncated\?\)",
        ),
        (
            _header(20240520, 7, 3) + b"\0" * 6,
            r"bad\.bin: llm.c magic 20240520 goes with version 1, the header says version 7",
        ),
        (
            _header(20240801, 7, 3) + b"\0" * 6,
            r"bad\.bin: the llm.c header says 3 tokens \(1036 bytes in all\), the file has 1030",
        ),
        (
            _header(20240521, 1, 3) + b"\0" * 6,
            r"bad\.bin has an llm.c header \(version 1, 3 tokens\) with the unknown magic "
            r"number 20240521",
        ),
        (_header(20240520, 1, 0)[:100], r"bad\.bin starts with llm.c's magic 20240520 but has "),
        (b"\1\0\2", r"bad\.bin has no llm.c header and an odd size \(3 bytes\)"),
    ],
)
def test_a_damaged_file_is_named(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.bin"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message):
        inspect_shard(path)


@pytest.mark.parametrize(
    ("name", "validation"),
    [
        ("fineweb_val_000000.bin", True),
        ("tiny_shakespeare_val.bin", True),
        ("val.bin", True),
        ("val-000.bin", True),
        ("fineweb_train_000001.bin", False),
        ("train.bin", False),
        ("interval_000.bin", False),
        ("values.bin", False),
    ],
)
def test_the_validation_rule(name: str, validation: bool) -> None:
    assert is_validation(Path(name)) is validation


def test_splits_by_name_or_by_eval_data(tmp_path: Path) -> None:
    written = write_token_corpus(
        tmp_path / "a", train_tokens=2000, val_tokens=500, shard_tokens=800
    )
    splits = open_splits(str(tmp_path / "a"))
    assert [s.path for s in splits.train] == written["train"]
    assert [s.path for s in splits.val] == written["val"]
    other = write_token_corpus(tmp_path / "b", train_tokens=900, val_tokens=100, shard_tokens=900)
    glob = str(tmp_path / "a" / "*_train_*.bin")
    with pytest.raises(DataError, match=r"no validation shard .*\n  hint: give the evaluation"):
        open_splits(glob)
    with_eval = open_splits(glob, str(other["val"][0]))
    assert [s.path for s in with_eval.val] == other["val"]
    assert len(with_eval.train) == 3


def test_one_dataset_has_one_format(tmp_path: Path) -> None:
    write_token_corpus(tmp_path, train_tokens=900, val_tokens=100, shard_tokens=1000)
    (tmp_path / "extra.bin").write_bytes(b"\0\1" * 10)
    with pytest.raises(DataError, match=r"extra.bin is a nanoGPT shard, .* a llm.c v1 one"):
        open_splits(str(tmp_path))


def test_missing_and_empty_paths_are_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"--data .*nowhere does not exist"):
        resolve_files(str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match=r"--data .*: no .bin file there"):
        resolve_files(str(tmp_path))


def test_vocabulary_by_format_or_tokenizer_record(tmp_path: Path) -> None:
    write_token_corpus(tmp_path / "v7", train_tokens=900, val_tokens=100, shard_tokens=1000,
                       kind="llm.c v7")  # fmt: skip
    assert declared_vocabulary(open_splits(str(tmp_path / "v7"))).size == 128256
    write_token_corpus(tmp_path / "v1", train_tokens=900, val_tokens=100, shard_tokens=1000)
    assert declared_vocabulary(open_splits(str(tmp_path / "v1"))).size == 50257
    (tmp_path / "v1" / "tokenizer.json").write_text('{"tokenizer": "bytes", "vocabulary": 257}')
    vocabulary = declared_vocabulary(open_splits(str(tmp_path / "v1")))
    assert (vocabulary.size, vocabulary.eot) == (257, None)
    assert "tokenizer.json (bytes)" in vocabulary.source


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ('{"vocabulary": 1000000000000}', r"vocabulary 1000000000000, end-of-text token None"),
        ('{"vocabulary": 1e12}', r"a vocabulary has 1 to 1,048,576 tokens"),
        ('{"vocabulary": ' + "9" * 5000 + "}", r"a number of 5,000 digits"),
        ("[" * 100_000, r"JSON nested more than 64 levels deep"),
    ],
)
def test_a_tokenizer_record_beyond_any_vocabulary_is_named(
    tmp_path: Path, record: str, message: str
) -> None:
    """A record saying 10^12 tokens made the model's embedding ask for terabytes; 5,000
    digits and deep nesting escaped as a ValueError and a RecursionError."""
    write_token_corpus(tmp_path, train_tokens=900, val_tokens=100, shard_tokens=1000)
    (tmp_path / "tokenizer.json").write_text(record)
    with pytest.raises(DataError, match=message) as caught:
        declared_vocabulary(open_splits(str(tmp_path)))
    assert caught.value.message.startswith(f"--data: {tmp_path / 'tokenizer.json'} cannot be")


def test_windows_are_consecutive_and_stay_inside_their_shard(tmp_path: Path) -> None:
    written = write_token_corpus(tmp_path, train_tokens=25, val_tokens=5, shard_tokens=10)
    tokens = [np.fromfile(p, dtype="<u2", offset=HEADER_BYTES) for p in written["train"]]
    reader = WindowReader(open_splits(str(tmp_path)).train, seq_len=3)
    # Shards of 10, 10 and 5 tokens: 3, 3 and 1 windows of 4 tokens.
    assert len(reader) == 7
    windows = reader.read(np.arange(7))
    assert windows.dtype == np.int64
    assert windows[0].tolist() == tokens[0][0:4].tolist()
    assert windows[2].tolist() == tokens[0][6:10].tolist()
    assert windows[3].tolist() == tokens[1][0:4].tolist()
    assert windows[6].tolist() == tokens[2][0:4].tolist()
    assert reader.read(np.array([6, 0]))[1].tolist() == windows[0].tolist()


def test_the_largest_token_is_found_chunk_by_chunk(tmp_path: Path) -> None:
    path = tmp_path / "c_train_0.bin"
    values = np.arange(1000) % 777
    values[500] = 4321
    write_llmc_shard(path, values)
    assert scan_max_token(inspect_shard(path), chunk_tokens=64) == 4321


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.parametrize("order", ["sequential", "random"])
def test_reading_every_window_leaves_the_resident_set_as_it_was(tmp_path: Path, order: str) -> None:
    path = tmp_path / "big_train_000000.bin"
    write_llmc_shard(path, np.zeros(32 << 20, dtype=np.uint16))  # 64 MiB of tokens
    reader = WindowReader((inspect_shard(path),), seq_len=1023)
    windows = np.arange(len(reader))
    if order == "random":
        np.random.default_rng(0).shuffle(windows)
    before = _rss_kb()
    for first in range(0, len(windows), 32):
        reader.read(windows[first : first + 32])
    grown_mb = (_rss_kb() - before) / 1024
    # A memory map of the shard, left as it is, would add up to its 64 MiB.
    assert grown_mb < 8, f"the resident set grew by {grown_mb:.1f} MiB"


@pytest.mark.parametrize(
    ("kind", "dtype", "header", "vocab"),
    [("llm.c v7", "<u4", HEADER_BYTES, 128_256), ("nanoGPT", "<u2", 0, 50_257)],
)
def test_windows_of_every_format(
    tmp_path: Path, kind: str, dtype: str, header: int, vocab: int
) -> None:
    written = write_token_corpus(
        tmp_path, train_tokens=100, val_tokens=10, shard_tokens=100, kind=kind, vocab=vocab
    )
    tokens = np.fromfile(written["train"][0], dtype=dtype, offset=header)
    reader = WindowReader(open_splits(str(tmp_path)).train, seq_len=9)
    assert len(reader) == 11
    assert reader.read(np.array([10, 1])).tolist() == [
        tokens[90:100].tolist(),
        tokens[9:19].tolist(),
    ]


def test_a_fifo_named_like_a_shard_is_refused_unopened(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "d_train_000.bin")
    with pytest.raises(DataError, match=r"d_train_000.bin is a FIFO \(named pipe\), not a"):
        inspect_shard(tmp_path / "d_train_000.bin")
