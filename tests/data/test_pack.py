from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest
from PIL import Image

from ddpimg.cli import main
from ddpimg.data.imagefolder import FolderSource, read_listing, write_listing
from ddpimg.data.pack import PLAN_FILE, PackOptions, pack
from ddpimg.data.sources import open_splits
from ddpimg.errors import DataError
from tests.datagen import make_image_tree


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    make_image_tree(root, classes=3, train_per_class=10, val_per_class=4, sizes=(40, 300))
    return root


def folder(tree: Path, split: str, tmp_path: Path) -> FolderSource:
    write_listing(tree / split, ["n00000000", "n00000001", "n00000002"], tmp_path / split)
    table = read_listing(tree / split, tmp_path / split)
    assert table is not None
    return FolderSource(tree / split, table)


def test_shards_hold_the_tree_byte_for_byte_in_its_order(tree: Path, tmp_path: Path) -> None:
    result = pack(tree, tmp_path / "shards", PackOptions(shard_samples=8, workers=2), io.StringIO())
    assert result.samples == {"train": 30, "val": 12}
    assert result.shards == {"train": 4, "val": 2}
    assert sorted(p.name for p in (tmp_path / "shards").glob("*.tar"))[:2] == [
        "train-000000.tar",
        "train-000001.tar",
    ]
    train, val = open_splits(tmp_path / "shards", tmp_path / "run")
    assert train.kind == "webdataset"
    assert train.classes == ["n00000000", "n00000001", "n00000002"]
    for split, shards in (("train", train), ("val", val)):
        files = folder(tree, split, tmp_path / "listing")
        assert len(shards) == len(files)
        assert shards.labels().tolist() == files.labels().tolist()
        assert [shards.read(i) for i in range(len(files))] == [
            files.read(i) for i in range(len(files))
        ]


def test_max_side_re_encodes_only_larger_images(tree: Path, tmp_path: Path) -> None:
    pack(tree, tmp_path / "shards", PackOptions(shard_samples=100, max_side=100), io.StringIO())
    train, _ = open_splits(tmp_path / "shards", tmp_path / "run")
    files = folder(tree, "train", tmp_path / "listing")
    resized = kept = 0
    for index in range(len(files)):
        original = Image.open(io.BytesIO(files.read(index)))
        stored = Image.open(io.BytesIO(train.read(index)))
        if max(original.size) > 100:
            assert max(stored.size) == 100
            assert stored.format == "JPEG"
            assert abs(stored.size[0] / stored.size[1] - original.size[0] / original.size[1]) < 0.05
            resized += 1
        else:
            assert train.read(index) == files.read(index)
            kept += 1
    assert resized
    assert kept


def test_an_interrupted_pack_resumes_with_the_missing_shards(tree: Path, tmp_path: Path) -> None:
    target = tmp_path / "shards"
    pack(tree, target, PackOptions(shard_samples=8), io.StringIO())
    first = target / "train-000000.tar"
    kept_time = os.stat(first).st_mtime_ns
    (target / "train-000002.tar").unlink()
    (target / ".train-000002.tar.999.tmp").write_bytes(b"half a shard")
    stream = io.StringIO()
    result = pack(tree, target, PackOptions(shard_samples=8), stream)
    assert result.written == 1
    assert os.stat(first).st_mtime_ns == kept_time
    assert not list(target.glob(".*.tmp"))
    assert "packing: 42/42 images (100%)" in stream.getvalue()
    assert len(open_splits(target, tmp_path / "run")[0]) == 30


def test_other_options_on_a_started_pack_are_refused(tree: Path, tmp_path: Path) -> None:
    target = tmp_path / "shards"
    pack(tree, target, PackOptions(shard_samples=8), io.StringIO())
    with pytest.raises(
        DataError,
        match=rf"{target} holds a pack of other options or another tree \(max_side, quality, "
        rf"samples_per_shard differ from {PLAN_FILE}\)\n  hint: pack into another directory",
    ):
        pack(tree, target, PackOptions(shard_samples=5, max_side=64), io.StringIO())


def test_shard_size_in_mb_is_estimated_from_the_files(tree: Path, tmp_path: Path) -> None:
    total = sum(p.stat().st_size for p in (tree / "train").rglob("*") if p.is_file())
    result = pack(tree, tmp_path / "shards", PackOptions(shard_mb=total / 3 / 1e6), io.StringIO())
    assert 3 <= result.shards["train"] <= 4
    plan = json.loads((tmp_path / "shards" / PLAN_FILE).read_text())
    assert plan["samples_per_shard"] == pytest.approx(10, abs=2)


def test_the_commands_pack_and_index(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "shards"
    assert main(["data", "pack", str(tree), str(target), "--shard-samples", "16"]) == 0
    out = capsys.readouterr().out
    assert f"{target}: train 30 samples in 2 shards, val 12 samples in 1 shards" in out
    assert f"mksquashfs {target} {target}.sqsh" in out
    assert f"--bind {target}.sqsh:/data:image-src=/" in out
    assert main(["data", "index", str(tree), "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert f"{tree}: 30 training and 12 evaluation samples, 3 classes (imagefolder)" in out
    assert main(["data", "index", str(tmp_path / "missing")]) == 2
    assert "ddpimg: error: --data" in capsys.readouterr().err


@pytest.mark.parametrize(
    "case",
    [
        (".", [], r"data pack: DST .* is SRC .*: the shards would be written into the image"),
        ("train/shards", [], r"data pack: DST .* is inside SRC .*: the shards would be"),
        ("../elsewhere", ["--shard-mb", "0"], r"--shard-mb must be a positive number of MB, got 0"),
        ("../elsewhere", ["--shard-mb", "nan"], r"--shard-mb must be a positive number of MB"),
        ("../elsewhere", ["--quality", "1000"], r"--quality must be from 1 to 100, got 1000"),
    ],
)
def test_requests_that_cannot_be_packed_exit_2_before_writing(
    tree: Path, capsys: pytest.CaptureFixture[str], case: tuple[str, list[str], str]
) -> None:
    target, extra, message = case
    before = sorted(tree.rglob("*"))
    assert main(["data", "pack", str(tree), str(tree / target), *extra]) == 2
    assert re.search("^ddpimg: error: " + message, capsys.readouterr().err)
    assert sorted(tree.rglob("*")) == before
    assert not (tree / "../elsewhere").exists()


def test_an_image_that_cannot_be_read_while_sizing_shards_is_a_data_error(tmp_path: Path) -> None:
    """With --max-side and no --shard-samples, pack re-encodes a sample of the images to size
    its shards: a FIFO there is named like one met while packing (exit 2), not a crash."""
    tree = make_image_tree(tmp_path / "tree", classes=1, train_per_class=1, val_per_class=1)
    os.mkfifo(tmp_path / "tree" / "train" / tree.classes[0] / "zz.jpg")
    with pytest.raises(DataError, match=r"zz\.jpg cannot be read: it is a FIFO \(named pipe\)"):
        pack(tmp_path / "tree", tmp_path / "shards", PackOptions(max_side=64), io.StringIO())
