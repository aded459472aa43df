from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ddpimg.data.table import META_FILE, encode_strings, read_table, write_table


def test_a_table_round_trips_memory_mapped(tmp_path: Path) -> None:
    directory = tmp_path / "index"
    write_table(
        directory,
        {"kind": "test"},
        {"label": np.array([3, 1, 2], dtype=np.int32)},
        {"path": ["a/x.jpg", "b/ü.png", ""]},
    )
    table = read_table(directory)
    assert table is not None
    assert len(table) == 3
    assert table.meta["kind"] == "test"
    assert isinstance(table.numbers["label"], np.memmap)
    assert table.numbers["label"].tolist() == [3, 1, 2]
    assert [table.string("path", row) for row in range(3)] == ["a/x.jpg", "b/ü.png", ""]


def test_strings_are_a_blob_and_offsets() -> None:
    blob, offsets = encode_strings(["ab", "", "cde"])
    assert bytes(blob) == b"abcde"
    assert offsets.tolist() == [0, 2, 2, 5]


def test_columns_of_different_lengths_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="different lengths"):
        write_table(tmp_path / "t", {}, {"label": np.zeros(2)}, {"path": ["a"]})


def test_a_rewrite_replaces_the_table_and_leaves_no_temporary(tmp_path: Path) -> None:
    directory = tmp_path / "index"
    write_table(directory, {"n": 1}, {"label": np.zeros(4, dtype=np.int32)}, {})
    write_table(directory, {"n": 2}, {"label": np.ones(2, dtype=np.int32)}, {})
    table = read_table(directory)
    assert table is not None
    assert (table.meta["n"], len(table)) == (2, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_missing_or_other_format_reads_as_none(tmp_path: Path) -> None:
    assert read_table(tmp_path / "nothing") is None
    directory = tmp_path / "index"
    write_table(directory, {}, {"label": np.zeros(1, dtype=np.int32)}, {})
    header = json.loads((directory / META_FILE).read_text())
    (directory / META_FILE).write_text(json.dumps(header | {"format": 999}))
    assert read_table(directory) is None
