from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from ddpimg.data.tarshards import (
    TarSource,
    dataset_classes,
    read_index,
    scan_shard,
    split_member,
    write_index,
)
from ddpimg.errors import DataError
from tests.datagen import make_image_tree, write_shards


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("abc.jpg", ("abc", "jpg")),
        ("dir/abc.seg.png", ("dir/abc", "seg.png")),
        ("a.b/c.cls", ("a.b/c", "cls")),
        ("noextension", None),
    ],
)
def test_keys_follow_webdataset(name: str, parts: tuple[str, str] | None) -> None:
    assert split_member(name) == parts


def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_an_index_reads_every_sample_by_its_byte_range(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "tree", classes=3, train_per_class=5, val_per_class=2)
    shards = write_shards(tree.root, tmp_path / "shards", per_shard=4)
    assert len(shards["train"]) == 4
    write_index(tmp_path / "shards", "train", tmp_path / "index")
    table = read_index(tmp_path / "shards", "train", tmp_path / "index")
    assert table is not None
    source = TarSource(tmp_path / "shards", table, tree.classes)
    files = sorted(p for p in (tree.root / "train").rglob("*") if p.is_file())
    assert len(source) == len(files) == 15
    assert [source.read(i) for i in range(15)] == [p.read_bytes() for p in files]
    assert source.labels().tolist() == [label for label in range(3) for _ in range(5)]
    assert (
        source.where(5)
        == f"{tmp_path}/shards/train-000001.tar:train0000005{files[5].suffix.lower()}"
    )


def test_a_changed_shard_invalidates_the_index(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path / "tree", classes=2, train_per_class=2, val_per_class=1)
    shards = write_shards(tree.root, tmp_path / "shards", per_shard=10)
    write_index(tmp_path / "shards", "train", tmp_path / "index")
    with shards["train"][0].open("ab") as stream:
        stream.write(b"\0" * 512)
    assert read_index(tmp_path / "shards", "train", tmp_path / "index") is None


def test_other_members_are_ignored_and_a_missing_label_is_named(tmp_path: Path) -> None:
    path = tmp_path / "train-0.tar"
    with tarfile.open(path, "w") as tar:
        add(tar, "one.jpg", b"jpeg")
        add(tar, "one.cls", b"7\n")
        add(tar, "one.json", b"{}")
        add(tar, "two.png", b"png")
    with pytest.raises(
        DataError,
        match=rf"--data: {path}: sample 'two' has no two.cls member\n  hint: each sample needs",
    ):
        scan_shard(path)
    with tarfile.open(path, "w") as tar:
        add(tar, "one.jpg", b"jpeg")
        add(tar, "one.cls", b"7\n")
    assert scan_shard(path) == [("one.jpg", 512, 4, 7)]


def test_a_label_that_is_not_a_number_is_named(tmp_path: Path) -> None:
    path = tmp_path / "train-0.tar"
    with tarfile.open(path, "w") as tar:
        add(tar, "one.jpg", b"jpeg")
        add(tar, "one.cls", b"cat")
    with pytest.raises(DataError, match=rf"{path}:one.cls holds 'cat', not a class number"):
        scan_shard(path)


def test_a_file_that_is_not_a_tar_is_named(tmp_path: Path) -> None:
    path = tmp_path / "train-0.tar"
    path.write_bytes(b"x" * 100)
    with pytest.raises(DataError, match=rf"--data: {path} cannot be read as a tar file"):
        scan_shard(path)


def test_classes_come_from_dataset_json_or_are_numbered(tmp_path: Path) -> None:
    assert dataset_classes(tmp_path, 3) == ["0", "1", "2"]
    (tmp_path / "dataset.json").write_text(json.dumps({"classes": ["cat", "dog"]}))
    assert dataset_classes(tmp_path, 2) == ["cat", "dog"]
    with pytest.raises(DataError, match=r"names 2 classes, but the shards use labels up to 4"):
        dataset_classes(tmp_path, 5)
