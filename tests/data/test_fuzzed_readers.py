"""The readers of files a user can be handed, fuzzed: tar shards, token shards, the tokenizer
record, and the indexes kept beside the data (the image listing, the tar index, the
token-maximum cache).

Property (Hypothesis, over valid files mutated byte by byte and field by field, and over
random bytes): every input ends, within a bounded time, in a result that is consistent
with the file, or in the documented error naming the file (``DataError``); an index that
is damaged is not trusted (read as absent, so it is rebuilt). Nothing else may escape: no
``ValueError`` from a number that does not parse, no ``IndexError`` from a cut record, no
loop that does not end.

The bounds (``tests.fuzz``) are a hang guard, not a verdict on speed (every example here
takes milliseconds; ``HANG_GUARD_S`` is hundreds of times that, and an example stopped by it
fails saying so), and a peak of allocated memory far above what a few KiB of input needs.
Found by this test and fixed: a pax record of length 0 looped forever; a non-octal size or
checksum, a pax record without a space, an over-long length field and a "²" label escaped
as ValueErrors; a damaged index whose columns disagree in length was used.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddpimg.data import imagefolder, tarshards, tokenindex
from ddpimg.data.table import META_FILE, read_table
from ddpimg.data.tarheaders import BLOCK
from ddpimg.data.tokenshards import (
    HEADER_BYTES,
    TOKENIZER_FILE,
    declared_vocabulary,
    inspect_shard,
    open_splits,
    scan_max_token,
    write_llmc_shard,
)
from ddpimg.errors import DataError
from tests.datagen import make_image_tree, write_shards
from tests.fuzz import FUZZ, HANG_GUARD_S, within_bounds
from tests.hangguard import hang_guard as guard

T = TypeVar("T")


def hang_guard(what: str) -> contextlib.AbstractContextManager[None]:
    return guard(what, HANG_GUARD_S)


def outcome(path: Path, read: Callable[[], T]) -> T | DataError:
    """``read()``'s result, or the DataError it raised, which must name ``path``; within
    the time and memory bounds of ``tests.fuzz``."""
    with within_bounds(f"reading {path.name}"):
        try:
            return read()
        except DataError as err:
            refused = err
    assert str(path) in refused.message, refused.message
    return refused


# --- tar shards -------------------------------------------------------------------------


def tar_bytes(fmt: int) -> bytes:
    """A small valid shard in ``fmt``: samples with long names (pax ``x``, GNU ``L`` or the
    ustar prefix), a directory, an image and a label member each."""
    stream = io.BytesIO()
    with tarfile.open(fileobj=stream, mode="w", format=fmt) as tar:
        folder = tarfile.TarInfo("dir")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        # ustar cannot store a last path component longer than 100 bytes.
        longest = "c" * (90 if fmt == tarfile.USTAR_FORMAT else 110)
        for number, key in enumerate(["a", "deep/" * 25 + "b", longest]):
            for extension, data in (("jpg", bytes(range(256)) * 3), ("cls", b"%d\n" % number)):
                info = tarfile.TarInfo(f"{key}.{extension}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return stream.getvalue()


VALID_TARS = {fmt: tar_bytes(fmt) for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT)}
VALID_TARS[tarfile.USTAR_FORMAT] = tar_bytes(tarfile.USTAR_FORMAT)


def header_offsets(raw: bytes) -> list[int]:
    """The blocks that are headers: every tar format here writes "ustar" at byte 257."""
    return [
        at for at in range(0, len(raw) - BLOCK + 1, BLOCK) if raw[at + 257 : at + 262] == b"ustar"
    ]


def resign(raw: bytearray) -> None:
    """Recompute the checksum of every header, so that a mutation inside a header reaches
    the fields behind the checksum instead of stopping at it."""
    for at in header_offsets(bytes(raw)):
        raw[at + 148 : at + 156] = b"        "
        raw[at + 148 : at + 156] = b"%06o\0 " % sum(raw[at : at + BLOCK])


@st.composite
def mutated_tars(draw: st.DrawFn) -> bytes:
    raw = bytearray(draw(st.sampled_from(list(VALID_TARS.values()))))
    headers = header_offsets(bytes(raw))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["byte", "field", "pax", "cut"]))
        if not raw:
            break
        if kind == "byte":
            at = draw(st.integers(0, len(raw) - 1))
            raw[at] = draw(st.integers(0, 255))
        elif kind == "field":
            # A header field: name, size, type flag, ustar magic, prefix.
            at = draw(st.sampled_from(headers))
            start, width = draw(
                st.sampled_from([(0, 100), (124, 12), (156, 1), (257, 8), (345, 155)])
            )
            value = draw(st.binary(min_size=width, max_size=width))
            raw[at + start : at + start + width] = value
        elif kind == "pax":
            # The data block after a header: pax records, GNU long names, file data.
            at = draw(st.sampled_from(headers)) + BLOCK
            record = draw(
                st.one_of(
                    st.binary(max_size=40),
                    st.builds(
                        lambda n, text: b"%d %s\n" % (n, text),
                        st.integers(-2, 60),
                        st.binary(max_size=30),
                    ),
                )
            )
            raw[at : at + len(record)] = record
        else:
            del raw[draw(st.integers(0, len(raw))) :]
    if draw(st.booleans()):
        resign(raw)
    return bytes(raw)


def check_samples(path: Path, samples: list[tuple[str, int, int, int]]) -> None:
    size = path.stat().st_size
    for name, offset, length, label in samples:
        assert 0 <= offset <= offset + length <= size, (name, offset, length, size)
        assert label >= 0


@FUZZ
@given(raw=st.one_of(mutated_tars(), st.binary(max_size=3 * BLOCK)))
def test_any_shard_ends_in_samples_or_an_error_naming_it(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "train-000000.tar"
    path.write_bytes(raw)
    result = outcome(path, lambda: tarshards.scan_shard(path))
    if not isinstance(result, DataError):
        check_samples(path, result)


def header(name: bytes, size_field: bytes, kind: bytes) -> bytes:
    block = bytearray(BLOCK)
    block[: len(name)] = name
    block[124:136] = size_field.ljust(12, b"\0")
    block[156:157] = kind
    block[257:263] = b"ustar\0"
    block[263:265] = b"00"
    block[148:156] = b"        "
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def with_data(data: bytes) -> bytes:
    return data + bytes(-len(data) % BLOCK)


def pax_shard(records: bytes) -> bytes:
    return (
        header(b"PaxHeader", b"%011o" % len(records), b"x")
        + with_data(records)
        + header(b"a.cls", b"%011o" % 2, b"0")
        + with_data(b"1\n")
        + bytes(2 * BLOCK)
    )


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (pax_shard(b"0 path=x\n"), "malformed pax record at byte 512"),  # the endless loop
        (pax_shard(b"12 path=a\n"), "malformed pax record"),  # runs past the data
        (pax_shard(b"9 path=ab"), "malformed pax record"),  # no newline at its end
        (pax_shard(b"10path=abc\n"), "malformed pax record"),  # no space
        (pax_shard(b"x9 path=a\n"), "malformed pax record"),  # not a number
        (pax_shard(b"9" * 5000 + b" path=a\n"), "malformed pax record"),  # int() would refuse
        (pax_shard(b"8 pathx\n"), "pax record without '='"),
        (header(b"a.cls", b"0000000089", b"0") + bytes(BLOCK), "size field .* not a number"),
        (header(b"a.cls", b"1_0", b"0") + bytes(BLOCK), "size field .* not a number"),
        (header(b"a.cls", b"\xff" * 12, b"0") + bytes(BLOCK), "size field .* not a number"),
        (header(b"a.cls", b"7777777777", b"x") + bytes(BLOCK), "runs past the end"),
    ],
)
def test_crafted_headers_are_named_errors(tmp_path: Path, raw: bytes, error: str) -> None:
    path = tmp_path / "train-000000.tar"
    path.write_bytes(raw)
    result = outcome(path, lambda: tarshards.scan_shard(path))
    assert isinstance(result, DataError)
    assert result.message.startswith(f"--data: {path} cannot be read as a tar file")
    assert re.search(error, result.message), result.message


@pytest.mark.parametrize("label", [b"\xc2\xb2", b"1" * 40, b"-1", b""])
def test_labels_that_are_not_class_numbers_are_named(tmp_path: Path, label: bytes) -> None:
    path = tmp_path / "train-000000.tar"
    raw = header(b"a.cls", b"%011o" % len(label), b"0") + with_data(label)
    path.write_bytes(header(b"a.jpg", b"0", b"0") + raw + bytes(2 * BLOCK))
    result = outcome(path, lambda: tarshards.scan_shard(path))
    assert isinstance(result, DataError)
    assert "not a class number" in result.message


@pytest.mark.parametrize(
    ("label", "message"),
    [
        (b"99999999999", r"holds 99999999999, a class number above 99,999"),
        (b"100000000", r"holds 100000000, a class number above 99,999"),
        (b"100000", r"holds 100000, a class number above 99,999"),
    ],
)
def test_a_class_number_beyond_any_dataset_is_refused_unbuilt(
    tmp_path: Path, label: bytes, message: str
) -> None:
    """A 20 KB shard whose label said 100000000 made 10^8 class names (and a model output
    as wide); 99999999999 overflowed the index's int32 column with a traceback. Refused
    while the shard is scanned, before anything is built (tracemalloc's peak)."""
    import tracemalloc

    path = tmp_path / "train-000000.tar"
    raw = header(b"a.cls", b"%011o" % len(label), b"0") + with_data(label)
    path.write_bytes(header(b"a.jpg", b"0", b"0") + raw + bytes(2 * BLOCK))
    tracemalloc.start()
    try:
        result = outcome(path, lambda: tarshards.scan_shard(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(result, DataError)
    assert re.search(message, result.message), result.message
    assert peak < 1 << 20, peak


def test_a_member_name_is_shown_escaped(tmp_path: Path) -> None:
    path = tmp_path / "train-000000.tar"
    raw = header(b"a\x1b[2J\n.cls", b"%011o" % 1, b"0") + with_data(b"x")
    path.write_bytes(raw + bytes(2 * BLOCK))
    result = outcome(path, lambda: tarshards.scan_shard(path))
    assert isinstance(result, DataError)
    assert ":a\\x1b[2J\\n.cls holds 'x', not a class number" in result.message


def test_the_valid_shards_read_whole(tmp_path: Path) -> None:
    """The control for the mutations: unmutated, each format gives its three samples."""
    for fmt, raw in VALID_TARS.items():
        path = tmp_path / f"train-{fmt}.tar"
        path.write_bytes(raw)
        samples = tarshards.scan_shard(path)
        assert [label for *_, label in samples] == [0, 1, 2], fmt


# --- token shards and the tokenizer record ----------------------------------------------


def llmc_bytes(tokens: int, version: int = 1) -> bytes:
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520 if version == 1 else 20240801, version, tokens)
    dtype = "<u2" if version == 1 else "<u4"
    return header.tobytes() + np.arange(tokens, dtype=dtype).tobytes()


@st.composite
def mutated_token_shards(draw: st.DrawFn) -> bytes:
    raw = bytearray(llmc_bytes(draw(st.integers(0, 64)), draw(st.sampled_from([1, 7]))))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["int", "byte", "cut", "grow"]))
        if kind == "int":  # magic, version, count: any int32
            at = 4 * draw(st.integers(0, 2))
            raw[at : at + 4] = draw(st.integers(-(2**31), 2**31 - 1)).to_bytes(
                4, "little", signed=True
            )
        elif kind == "byte" and raw:
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
        elif kind == "cut":
            del raw[draw(st.integers(0, len(raw))) :]
        else:
            raw += draw(st.binary(max_size=9))
    return bytes(raw)


@FUZZ
@given(raw=st.one_of(mutated_token_shards(), st.binary(max_size=HEADER_BYTES + 64)))
def test_any_token_shard_ends_in_its_tokens_or_an_error_naming_it(
    tmp_path: Path, raw: bytes
) -> None:
    path = tmp_path / "data_train_000.bin"
    path.write_bytes(raw)
    shard = outcome(path, lambda: inspect_shard(path))
    if isinstance(shard, DataError):
        return
    itemsize = shard.format.dtype.itemsize
    assert shard.format.header_bytes + shard.tokens * itemsize == len(raw)
    largest = outcome(path, lambda: scan_max_token(shard))
    assert not isinstance(largest, DataError)
    assert -1 <= largest < 2 ** (8 * itemsize)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
tokenizer_records = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"vocabulary": json_values, "eot_token": json_values, "tokenizer": json_values}
    ),
)


@pytest.fixture(scope="module")
def token_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tokens")
    write_llmc_shard(root / "d_train_000.bin", np.arange(100) % 50)
    write_llmc_shard(root / "d_val_000.bin", np.arange(40) % 50)
    return root


@FUZZ
@given(record=tokenizer_records, as_text=st.one_of(st.none(), st.text(max_size=30)))
def test_any_tokenizer_record_ends_in_a_vocabulary_or_an_error_naming_it(
    token_data: Path, record: Any, as_text: str | None
) -> None:
    path = token_data / TOKENIZER_FILE
    path.write_text(json.dumps(record) if as_text is None else as_text, encoding="utf-8")
    try:
        vocabulary = outcome(path, lambda: declared_vocabulary(open_splits(str(token_data))))
    finally:
        path.unlink()
    if not isinstance(vocabulary, DataError):
        assert vocabulary.size > 0
        assert vocabulary.eot is None or 0 <= vocabulary.eot < vocabulary.size


@FUZZ
@given(entries=st.one_of(json_values, st.dictionaries(st.text(max_size=4), json_values)))
def test_a_damaged_token_index_is_scanned_again(
    token_data: Path, tmp_path: Path, entries: Any
) -> None:
    splits = open_splits(str(token_data))
    folder = tmp_path / "run" / tokenindex.INDEX_NAME
    folder.mkdir(parents=True, exist_ok=True)
    # Damaged entries, under the real shards' names too.
    named = {str(shard.path.resolve()): entries for shard in splits.all()}
    for content in (entries, named):
        (folder / tokenindex.INDEX_FILE).write_text(json.dumps(content), encoding="utf-8")
        with hang_guard("the token index"):
            found = tokenindex.max_tokens(splits, tmp_path / "run")
        truth = {shard.path: scan_max_token(shard) for shard in splits.all()}
        assert found is None or found == truth


# --- the indexes kept beside the data ---------------------------------------------------


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An image tree with its listing, and its shards with their index (train split)."""
    base = tmp_path_factory.mktemp("indexed")
    tree = make_image_tree(base / "tree", classes=3, train_per_class=3, val_per_class=1)
    shards = base / "shards"
    write_shards(tree.root, shards, per_shard=4)
    imagefolder.write_listing(tree.root / "train", tree.classes, base / "listing")
    tarshards.write_index(shards, "train", base / "tarindex")
    return {
        "tree": tree.root,
        "shards": shards,
        "listing": base / "listing",
        "tarindex": base / "tarindex",
    }


@st.composite
def damaged_tables(draw: st.DrawFn, source: Path) -> dict[str, bytes]:
    """The files of the table in ``source``, some of them mutated."""
    files = {path.name: path.read_bytes() for path in sorted(source.iterdir())}
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(sorted(files)))
        raw = bytearray(files[name])
        if name == META_FILE and raw == (source / META_FILE).read_bytes() and draw(st.booleans()):
            meta = json.loads(raw)
            meta[draw(st.sampled_from(sorted(meta)))] = draw(json_values)
            files[name] = json.dumps(meta).encode()
            continue
        kind = draw(st.sampled_from(["byte", "cut", "drop"]))
        if kind == "byte" and raw:
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
            files[name] = bytes(raw)
        elif kind == "cut":
            files[name] = bytes(raw[: draw(st.integers(0, len(raw)))])
        else:
            del files[name]
            if not files:
                break
    return files


def write_files(directory: Path, files: dict[str, bytes]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.iterdir():
        old.unlink()
    for name, raw in files.items():
        (directory / name).write_bytes(raw)


def check_whole(table: Any, rows_column: str, string_column: str) -> None:
    """A table that was trusted: its columns agree, and every string decodes."""
    rows = len(table)
    assert all(len(column) == rows for column in table.numbers.values())
    for row in range(rows):
        table.string(string_column, row)
    assert len(table.numbers[rows_column]) == rows


@FUZZ
@given(data=st.data())
def test_a_damaged_image_listing_is_rebuilt_not_trusted(
    indexed: dict[str, Path], tmp_path: Path, data: st.DataObject
) -> None:
    files = data.draw(damaged_tables(indexed["listing"]))
    write_files(tmp_path / "listing", files)
    with hang_guard("the image listing"):
        table = imagefolder.read_listing(indexed["tree"] / "train", tmp_path / "listing")
    if table is not None:
        check_whole(table, "label", "path")
        classes = table.meta["classes"]
        assert all(0 <= label < len(classes) for label in table.numbers["label"].tolist())


@FUZZ
@given(data=st.data())
def test_a_damaged_tar_index_is_rebuilt_not_trusted(
    indexed: dict[str, Path], tmp_path: Path, data: st.DataObject
) -> None:
    files = data.draw(damaged_tables(indexed["tarindex"]))
    write_files(tmp_path / "tarindex", files)
    with hang_guard("the tar index"):
        table = tarshards.read_index(indexed["shards"], "train", tmp_path / "tarindex")
    if table is not None:
        check_whole(table, "label", "member")
        source = tarshards.TarSource(indexed["shards"], table, ["a", "b", "c"])
        for index in range(len(source)):
            source.read(index)  # every byte range lies inside its shard


def test_the_undamaged_indexes_are_trusted(indexed: dict[str, Path]) -> None:
    """The control for the damage: as written, both indexes are read."""
    assert imagefolder.read_listing(indexed["tree"] / "train", indexed["listing"]) is not None
    assert tarshards.read_index(indexed["shards"], "train", indexed["tarindex"]) is not None
    assert read_table(indexed["listing"], numbers_needed=["label"]) is not None


def test_a_fifo_named_like_a_shard_is_refused_unopened(tmp_path: Path) -> None:
    import os

    path = tmp_path / "train-000000.tar"
    os.mkfifo(path)
    result = outcome(path, lambda: tarshards.scan_shard(path))
    assert isinstance(result, DataError)
    assert "is a FIFO (named pipe), not a regular file" in result.message
