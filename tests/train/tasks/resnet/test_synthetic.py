from __future__ import annotations

import pytest
import torch

from ddpimg.train.sharding import BatchPlan
from ddpimg.train.tasks.resnet.synthetic import SyntheticImages, synthetic_imagenet

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
    planned = next(train_set.batches(BatchPlan(1, torch.arange(100), (slice(3, 8),))))
    assert torch.equal(planned[0][0], images[0])
    assert planned[1][0] == labels[0]


def test_evaluation_samples_are_not_training_samples() -> None:
    train_set, eval_set = synthetic()
    rows = torch.arange(4)
    assert not torch.equal(train_set.batch(rows)[0], eval_set.batch(rows)[0])


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
