from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddpimg.data.images import INDEX_DIR, detect_layout, index_dirs
from ddpimg.data.sources import open_splits, prepare
from ddpimg.errors import DataError
from tests.datagen import make_image_tree, write_shards


def test_a_tree_is_indexed_beside_it_once(tmp_path: Path) -> None:
    make_image_tree(tmp_path / "data", classes=2, train_per_class=3, val_per_class=1)
    out = tmp_path / "run"
    first = prepare(tmp_path / "data", out)
    assert first == [tmp_path / "data" / INDEX_DIR / split for split in ("train", "val")]
    mtime = os.stat(first[0] / "table.json").st_mtime_ns
    assert prepare(tmp_path / "data", out) == first
    assert os.stat(first[0] / "table.json").st_mtime_ns == mtime  # reused, not rewritten
    train, val = open_splits(tmp_path / "data", out)
    assert (len(train), len(val)) == (6, 2)
    assert train.kind == "imagefolder"


def test_where_the_index_cannot_go_beside_the_data_it_goes_to_the_run(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_image_tree(data, classes=2, train_per_class=1, val_per_class=1)
    (data / INDEX_DIR).write_text("a file in the way, as on a read-only image")
    found = prepare(data, tmp_path / "run")
    assert found[0].parent == index_dirs(data, tmp_path / "run")[1]
    assert str(found[0]).startswith(f"{tmp_path}/run/{INDEX_DIR}/")
    assert len(open_splits(data, tmp_path / "run")[0]) == 2


def test_shards_are_indexed_and_opened(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "tree", classes=3, train_per_class=2, val_per_class=1)
    write_shards(tree.root, tmp_path / "shards", per_shard=4)
    assert detect_layout(tmp_path / "shards") == "tar"
    prepare(tmp_path / "shards", tmp_path / "run")
    train, val = open_splits(tmp_path / "shards", tmp_path / "run")
    assert (len(train), len(val), train.kind) == (6, 3, "webdataset")
    assert train.classes == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda root: None, r"--data .*/nowhere does not exist"),
        (
            lambda root: (root / "train").mkdir(parents=True),
            r"--data .*/nowhere: no .*/nowhere/val directory",
        ),
        (
            lambda root: (root.mkdir(), (root / "train-0.tar").write_bytes(b"")),
            r"--data .*/nowhere: no shard matches .*/nowhere/val-\*\.tar",
        ),
        (
            lambda root: root.mkdir(),
            r"--data .*/nowhere: neither train/ and val/ directories nor train-\*\.tar shards"
            r"\n  hint: give an ImageFolder tree",
        ),
    ],
)
def test_layout_errors_name_the_path(tmp_path: Path, setup: object, message: str) -> None:
    root = tmp_path / "nowhere"
    setup(root)  # type: ignore[operator]
    with pytest.raises(DataError, match=message):
        prepare(root, tmp_path / "run")


def test_an_empty_split_is_named(tmp_path: Path) -> None:
    make_image_tree(tmp_path, classes=1, train_per_class=0, val_per_class=1)
    prepare(tmp_path, tmp_path / "run")
    with pytest.raises(DataError, match=rf"--data: {tmp_path}/train holds no image files"):
        open_splits(tmp_path, tmp_path / "run")
