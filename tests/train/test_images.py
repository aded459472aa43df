from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from ddpimg.errors import DataError
from ddpimg.train.images import SyntheticImages, load_image_folder, synthetic_imagenet

CPU = torch.device("cpu")


def synthetic(
    train: int | None = 100, test: int | None = 20, last: bool = False
) -> tuple[SyntheticImages, SyntheticImages]:
    return synthetic_imagenet(
        32, train_samples=train, eval_samples=test, device=CPU, channels_last=last
    )


def test_synthetic_set_is_imagenet_shaped() -> None:
    train_set, eval_set = synthetic(train=None, test=None)
    assert (len(train_set), len(eval_set)) == (1_281_167, 50_000)
    images, labels = train_set.batch(torch.tensor([0, 1_281_166]))
    assert images.shape == (2, 3, 32, 32)
    assert images.dtype == torch.float32
    assert labels.dtype == torch.int64


def test_a_sample_depends_on_its_index_only() -> None:
    train_set, _ = synthetic()
    again, _ = synthetic(train=50)
    rows = torch.tensor([3, 40, 7])
    images, labels = train_set.batch(rows)
    other_images, other_labels = again.batch(rows)
    assert torch.equal(images, other_images)
    assert torch.equal(labels, other_labels)
    sliced, sliced_labels = train_set.batch(slice(3, 8))
    assert torch.equal(sliced[0], images[0])
    assert sliced_labels[0] == labels[0]


def test_evaluation_samples_are_not_training_samples() -> None:
    train_set, eval_set = synthetic()
    assert not torch.equal(train_set.batch(slice(0, 4))[0], eval_set.batch(slice(0, 4))[0])


def test_labels_cover_the_classes_frequent_ones_first() -> None:
    train_set, _ = synthetic()
    labels = train_set.labels(torch.arange(200_000))
    counts = torch.bincount(labels, minlength=1000).double() / 200_000
    assert int(labels.min()) == 0
    assert int(labels.max()) == 999
    # Log-uniform: class k has probability ln((k+2)/(k+1)) / ln(1001).
    assert float(counts[0]) == pytest.approx(0.1003, abs=0.005)
    assert float(counts[99]) == pytest.approx(0.00144, abs=0.0005)


def test_a_class_has_one_pattern() -> None:
    train_set, _ = synthetic(train=3000)
    images, labels = train_set.batch(torch.arange(3000))
    zeros = images[labels == 0]
    # Same class: the pattern is shared, only the noise differs.
    same = (zeros[0] - zeros[1]).abs().mean()
    other = (zeros[0] - images[labels == 1][0]).abs().mean()
    assert float(same) < float(other)


def test_channels_last_on_request() -> None:
    train_set, _ = synthetic(last=True)
    images, _ = train_set.batch(torch.tensor([1, 2]))
    assert images.is_contiguous(memory_format=torch.channels_last)


def make_folder(root: Path, layout: dict[str, dict[str, int]]) -> None:
    """``layout``: split -> class -> number of PNG images (16 x 24, a colour per image)."""
    for split, classes in layout.items():
        for name, count in classes.items():
            folder = root / split / name
            folder.mkdir(parents=True)
            for index in range(count):
                value = 40 * index + (100 if name == "b" else 0)
                Image.new("RGB", (24, 16), (value, value, value)).save(folder / f"{index}.png")


def test_image_folder_is_decoded_resized_and_cropped(tmp_path: Path) -> None:
    make_folder(tmp_path, {"train": {"a": 3, "b": 2}, "val": {"a": 1, "b": 1}})
    data = load_image_folder(
        tmp_path, 8, train_samples=None, eval_samples=None, device=CPU, channels_last=False
    )
    assert data.classes == ["a", "b"]
    assert (len(data.train), len(data.eval)) == (5, 2)
    assert data.train.images.shape == (5, 3, 8, 8)
    assert data.train.labels.tolist() == [0, 0, 0, 1, 1]
    assert data.train.images[4, 0, 0, 0].item() == 140
    images, labels = data.train.batch(torch.tensor([0]))
    assert images[0, 0, 0, 0].item() == pytest.approx((0 - 0.485) / 0.229)
    assert labels.tolist() == [0]


def test_train_samples_are_spread_over_the_classes(tmp_path: Path) -> None:
    make_folder(tmp_path, {"train": {"a": 4, "b": 4}, "val": {"a": 1, "b": 1}})
    data = load_image_folder(
        tmp_path, 8, train_samples=2, eval_samples=1, device=CPU, channels_last=False
    )
    assert data.train.labels.tolist() == [0, 1]
    assert len(data.eval) == 1


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"train": {"a": 1}}, r"--data .*: no .*/val directory\n  hint: give a directory laid"),
        (
            {"train": {"a": 1, "b": 1}, "val": {"a": 1, "c": 1}},
            r"train/ and val/ have different class folders \(only in train/: \['b'\], only in "
            r"val/: \['c'\]\)",
        ),
        ({"train": {"a": 0}, "val": {"a": 1}}, r"--data: .*/train holds no image files"),
    ],
)
def test_image_folder_errors(
    tmp_path: Path, layout: dict[str, dict[str, int]], message: str
) -> None:
    make_folder(tmp_path, layout)
    with pytest.raises(DataError, match=message):
        load_image_folder(
            tmp_path, 8, train_samples=None, eval_samples=None, device=CPU, channels_last=False
        )


def test_undecodable_image_is_named(tmp_path: Path) -> None:
    make_folder(tmp_path, {"train": {"a": 1}, "val": {"a": 1}})
    (tmp_path / "train" / "a" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match=r"--data: .*broken.png cannot be decoded as an image"):
        load_image_folder(
            tmp_path, 8, train_samples=None, eval_samples=None, device=CPU, channels_last=False
        )


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"--data .*nowhere does not exist"):
        load_image_folder(
            tmp_path / "nowhere", 8, train_samples=None, eval_samples=None, device=CPU,
            channels_last=False,
        )  # fmt: skip
