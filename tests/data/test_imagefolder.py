from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddpimg.data.imagefolder import FolderSource, folder_classes, read_listing, write_listing
from ddpimg.errors import DataError
from tests.datagen import make_image_tree
from tests.hangguard import hang_guard


def test_listing_follows_torchvisions_image_folder(tmp_path: Path) -> None:
    from torchvision.datasets import ImageFolder

    tree = make_image_tree(tmp_path, classes=3, train_per_class=4, val_per_class=1)
    (tmp_path / "train" / tree.classes[1] / "notes.txt").write_text("not an image")
    nested = tmp_path / "train" / tree.classes[2] / "more"
    nested.mkdir()
    (nested / "extra.PNG").write_bytes(
        (tmp_path / "train" / tree.classes[0]).iterdir().__next__().read_bytes()
    )
    write_listing(tmp_path / "train", folder_classes(tmp_path), tmp_path / "index")
    table = read_listing(tmp_path / "train", tmp_path / "index")
    assert table is not None
    source = FolderSource(tmp_path / "train", table)
    reference = ImageFolder(str(tmp_path / "train"))
    assert source.classes == reference.classes
    assert [source.where(i) for i in range(len(source))] == [p for p, _ in reference.samples]
    assert source.labels().tolist() == [label for _, label in reference.samples]
    assert source.read(0) == Path(reference.samples[0][0]).read_bytes()


def test_a_changed_folder_invalidates_the_listing(tmp_path: Path) -> None:
    tree = make_image_tree(tmp_path, classes=2, train_per_class=2, val_per_class=1)
    write_listing(tmp_path / "train", tree.classes, tmp_path / "index")
    assert read_listing(tmp_path / "train", tmp_path / "index") is not None
    folder = tmp_path / "train" / tree.classes[0]
    victim = next(folder.iterdir())
    victim.unlink()
    # A folder's time changes when an entry goes; make sure the clock moved a second.
    os.utime(folder, (0, os.stat(folder).st_mtime + 1))
    assert read_listing(tmp_path / "train", tmp_path / "index") is None


def test_a_listing_of_another_tree_is_not_taken(tmp_path: Path) -> None:
    make_image_tree(tmp_path / "one", classes=2, train_per_class=1, val_per_class=1)
    make_image_tree(tmp_path / "two", classes=2, train_per_class=1, val_per_class=1)
    write_listing(tmp_path / "one" / "train", ["n00000000", "n00000001"], tmp_path / "index")
    assert read_listing(tmp_path / "two" / "train", tmp_path / "index") is None


def test_splits_with_other_classes_are_refused(tmp_path: Path) -> None:
    for split, name in (("train", "a"), ("train", "b"), ("val", "a"), ("val", "c")):
        (tmp_path / split / name).mkdir(parents=True)
    with pytest.raises(
        DataError,
        match=r"train/ and val/ have different class folders \(only in train/: \['b'\], only "
        r"in val/: \['c'\]\)\n  hint: both splits need a folder for every class",
    ):
        folder_classes(tmp_path)


@pytest.mark.parametrize("size", [0, 1, 70_000, 300_000])
def test_a_file_is_read_whole_whatever_its_size(tmp_path: Path, size: int) -> None:
    folder = tmp_path / "train" / "only"
    folder.mkdir(parents=True)
    content = os.urandom(size)
    (folder / "a.jpg").write_bytes(content)
    write_listing(tmp_path / "train", ["only"], tmp_path / "index")
    table = read_listing(tmp_path / "train", tmp_path / "index")
    assert table is not None
    assert FolderSource(tmp_path / "train", table).read(0) == content


def test_a_missing_file_is_a_file_not_found_error(tmp_path: Path) -> None:
    folder = tmp_path / "train" / "only"
    folder.mkdir(parents=True)
    (folder / "a.jpg").write_bytes(b"x")
    write_listing(tmp_path / "train", ["only"], tmp_path / "index")
    table = read_listing(tmp_path / "train", tmp_path / "index")
    assert table is not None
    (folder / "a.jpg").unlink()
    with pytest.raises(FileNotFoundError):
        FolderSource(tmp_path / "train", table).read(0)


def test_a_link_out_of_a_class_folder_is_named_not_followed(tmp_path: Path) -> None:
    """``train/cat/up -> ..`` once read 6 images as 246 and labelled the dog images cat;
    now it is a named error, and nothing is listed."""
    tree = make_image_tree(tmp_path, classes=2, train_per_class=3, val_per_class=1)
    (tmp_path / "train" / tree.classes[0] / "up").symlink_to("..")
    with pytest.raises(DataError, match=rf"class {tree.classes[0]} of .*/up is a link to"):
        write_listing(tmp_path / "train", folder_classes(tmp_path), tmp_path / "index")
    assert not (tmp_path / "index").exists()


def test_links_around_a_loop_end_the_walk(tmp_path: Path) -> None:
    """Two links to "." made the listing walk 2^depth folders (it never ended)."""
    tree = make_image_tree(tmp_path, classes=2, train_per_class=1, val_per_class=1)
    folder = tmp_path / "train" / tree.classes[1]
    (folder / "again").symlink_to(".")
    (folder / "more").symlink_to(".")
    with (
        hang_guard("listing a tree with a loop of links", 60),
        pytest.raises(DataError, match=r"already went through \(a loop of links"),
    ):
        write_listing(tmp_path / "train", folder_classes(tmp_path), tmp_path / "index")


def test_a_fifo_named_like_an_image_is_refused_not_read(tmp_path: Path) -> None:
    """Read by a loader worker, it would wait forever for a writer."""
    tree = make_image_tree(tmp_path, classes=2, train_per_class=1, val_per_class=1)
    os.mkfifo(tmp_path / "train" / tree.classes[0] / "zz.jpg")
    write_listing(tmp_path / "train", tree.classes, tmp_path / "index")
    table = read_listing(tmp_path / "train", tmp_path / "index")
    assert table is not None
    source = FolderSource(tmp_path / "train", table)
    fifo = next(i for i in range(len(source)) if source.where(i).endswith("zz.jpg"))
    with pytest.raises(ValueError, match=r"a FIFO \(named pipe\), not a regular file"):
        source.read(fifo)
