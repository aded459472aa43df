from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ddpimg.data import tokenindex
from ddpimg.data.images import INDEX_DIR, index_dirs
from ddpimg.data.tokenshards import open_splits, write_llmc_shard
from tests.datagen import write_token_corpus


def test_scanned_once_then_read_from_the_index(tmp_path: Path) -> None:
    root = tmp_path / "data"
    written = write_token_corpus(root, train_tokens=5000, val_tokens=500, shard_tokens=2000)
    splits = open_splits(str(root))
    assert tokenindex.max_tokens(splits, tmp_path / "run") is None
    report = io.StringIO()
    tokenindex.prepare(splits, tmp_path / "run", report)
    assert "scanning 5,500 tokens of 4 shard(s)" in report.getvalue()
    maxima = tokenindex.max_tokens(splits, tmp_path / "run")
    assert maxima is not None
    assert maxima[written["val"][0]] == int(
        np.fromfile(written["val"][0], dtype="<u2", offset=1024).max()
    )
    again = io.StringIO()
    tokenindex.prepare(splits, tmp_path / "run", again)
    assert again.getvalue() == ""
    # A rewritten shard (another size) is scanned again, alone.
    write_llmc_shard(written["train"][0], np.full(10, 7))
    changed = open_splits(str(root))
    assert tokenindex.max_tokens(changed, tmp_path / "run") is None
    third = io.StringIO()
    tokenindex.prepare(changed, tmp_path / "run", third)
    assert "scanning 10 tokens of 1 shard(s)" in third.getvalue()
    assert tokenindex.max_tokens(changed, tmp_path / "run") == {**maxima, written["train"][0]: 7}


def test_data_that_cannot_hold_an_index_keeps_it_in_the_run(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write_token_corpus(root, train_tokens=900, val_tokens=100, shard_tokens=1000)
    (root / INDEX_DIR).write_text("a file in the way, as on a read-only image")
    splits = open_splits(str(root))
    tokenindex.prepare(splits, tmp_path / "run")
    assert (index_dirs(root, tmp_path / "run")[1] / "tokens" / "tokens.json").is_file()
    assert tokenindex.max_tokens(splits, tmp_path / "run") is not None
