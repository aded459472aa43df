from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ddpimg.data.sources import open_splits, prepare
from ddpimg.errors import DataError
from ddpimg.train.batch import BatchLayout
from ddpimg.train.sharding import BatchPlan, EvalShard, TrainShard, epoch_order
from ddpimg.train.tasks.resnet import stream as stream_module
from ddpimg.train.tasks.resnet.stream import (
    EVAL,
    MEAN,
    STD,
    TRAIN,
    BatchBuffers,
    ImageStream,
    SampleReader,
    SplitView,
    StreamedImages,
    spread,
)
from tests.datagen import make_image_tree

CPU = torch.device("cpu")
SIZE = 24


def views(root: Path) -> tuple[SplitView, SplitView]:
    prepare(root, root / "run")
    train, val = open_splits(root, root / "run")
    return SplitView(train), SplitView(val)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    make_image_tree(root, classes=4, train_per_class=12, val_per_class=3)
    return root


def stream(
    root: Path, workers: int, skip_bad: bool = False, channels_last: bool = False
) -> ImageStream:
    return ImageStream(
        views(root), SIZE, seed=7, workers=workers, skip_bad=skip_bad, device=CPU,
        channels_last=channels_last,
    )  # fmt: skip


def plan(epoch: int, steps: int = 3, per_rank: int = 4) -> BatchPlan:
    return TrainShard(48, BatchLayout(per_rank, 1), 0).plan(
        epoch_order(48, 7, epoch), epoch, 0, steps
    )


def collect(
    dataset: StreamedImages, batch_plan: BatchPlan
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(dataset.batches(batch_plan))


def test_workers_do_not_change_a_single_pixel(tree: Path) -> None:
    in_process = StreamedImages(stream(tree, workers=0), TRAIN)
    with_workers = StreamedImages(stream(tree, workers=2), TRAIN)
    first = collect(in_process, plan(1))
    assert [b[0].shape for b in first] == [(4, 3, SIZE, SIZE)] * 3
    for (images, labels), (other_images, other_labels) in zip(
        first, collect(with_workers, plan(1)), strict=True
    ):
        assert torch.equal(images, other_images)
        assert torch.equal(labels, other_labels)
    # The persistent workers serve the next plan, and evaluation, too.
    assert torch.equal(collect(with_workers, plan(2))[0][0], collect(in_process, plan(2))[0][0])
    eval_plan = EvalShard(12, 5, 0, 1).plan()
    evaluated = collect(StreamedImages(with_workers.stream, EVAL), eval_plan)
    assert [len(labels) for _, labels in evaluated] == [5, 5, 2]


def test_augmentation_depends_on_epoch_and_sample_only(tree: Path) -> None:
    reader = SampleReader(views(tree), SIZE, seed=7, skip_bad=False)
    first = reader[(TRAIN, 1, 5)].pixels
    assert np.array_equal(first, reader[(TRAIN, 1, 5)].pixels)
    assert not np.array_equal(first, reader[(TRAIN, 2, 5)].pixels)
    other_seed = SampleReader(views(tree), SIZE, seed=8, skip_bad=False)
    assert not np.array_equal(first, other_seed[(TRAIN, 1, 5)].pixels)
    evaluated = reader[(EVAL, None, 2)]
    assert np.array_equal(evaluated.pixels, reader[(EVAL, None, 2)].pixels)
    assert evaluated.label == views(tree)[1].label(2)


@pytest.mark.parametrize("channels_last", [False, True])
def test_batches_are_normalised_with_imagenets_statistics(tree: Path, channels_last: bool) -> None:
    source = stream(tree, workers=0, channels_last=channels_last)
    images, labels = collect(StreamedImages(source, TRAIN), plan(1, steps=1))[0]
    reader = SampleReader(views(tree), SIZE, seed=7, skip_bad=False)
    rows = plan(1, steps=1).rows(0).tolist()
    raw = torch.from_numpy(np.stack([reader[(TRAIN, 1, row)].pixels for row in rows]))
    expected = (raw.permute(0, 3, 1, 2).float() / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) / (
        torch.tensor(STD).view(1, 3, 1, 1)
    )
    # Measured difference 4.8e-7 (the same arithmetic in another order; 2026-11-26), 2% of
    # the tolerance; a wrong mean or std changes pixels by 1e-2 or more.
    assert torch.allclose(images, expected, atol=1e-5)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    assert images.is_contiguous(memory_format=layout)
    assert labels.tolist() == [views(tree)[0].label(row) for row in rows]


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, int, int]:
    """A tree with one file that is not an image and one truncated JPEG; their indexes."""
    make_image_tree(tmp_path, classes=2, train_per_class=6, val_per_class=1)
    folder = tmp_path / "train" / "n00000000"
    (folder / "n00000000_00002.zz.jpg").write_bytes(b"<html>not an image</html>")
    victim = next(p for p in sorted(folder.iterdir()) if p.suffix == ".jpg" and "zz" not in p.name)
    victim.write_bytes(victim.read_bytes()[:300])
    files = sorted(p.name for p in folder.iterdir())
    return tmp_path, files.index("n00000000_00002.zz.jpg"), files.index(victim.name)


def test_an_unreadable_sample_is_an_error_naming_it(damaged: tuple[Path, int, int]) -> None:
    root, garbage, _ = damaged
    dataset = StreamedImages(stream(root, workers=0), TRAIN)
    rows = BatchPlan(1, torch.tensor([garbage]), (slice(0, 1),))
    with pytest.raises(
        DataError,
        match=rf"^sample {garbage} \({root}/train/n00000000/n00000000_00002\.zz\.jpg\) cannot be "
        r"read as an image: .*\n  hint: replace or remove the file .* --bad-samples skip",
    ):
        collect(dataset, rows)


def test_a_truncated_jpeg_is_an_error_too(damaged: tuple[Path, int, int]) -> None:
    root, _, truncated = damaged
    dataset = StreamedImages(stream(root, workers=0), TRAIN)
    with pytest.raises(DataError, match=rf"^sample {truncated} \(.*\) cannot be read as an image"):
        collect(dataset, BatchPlan(1, torch.tensor([truncated]), (slice(0, 1),)))


def test_skipping_substitutes_the_next_readable_sample_and_counts(
    damaged: tuple[Path, int, int],
) -> None:
    root, garbage, truncated = damaged
    reader = SampleReader(views(root), SIZE, seed=7, skip_bad=True)
    substitute = reader[(TRAIN, 1, garbage)]
    assert substitute.substituted
    following = next(i for i in range(garbage + 1, 12) if i != truncated)
    assert np.array_equal(substitute.pixels, reader[(TRAIN, 1, following)].pixels)
    assert substitute.label == views(root)[0].label(following)
    dataset = StreamedImages(stream(root, workers=2, skip_bad=True), TRAIN)
    good = [i for i in range(12) if i not in (garbage, truncated)][:2]
    order = torch.tensor([garbage, truncated, *good])
    batches = collect(dataset, BatchPlan(1, order, (slice(0, 2), slice(2, 4))))
    assert len(batches) == 2
    assert dataset.skipped() == 2


def test_a_subset_is_spread_over_the_index() -> None:
    assert spread(10, 10) is None
    assert spread(10, 4).tolist() == [0, 2, 5, 7]


def test_a_float_batch_is_reused_only_once_nothing_refers_to_it() -> None:
    buffers = BatchBuffers(8, torch.contiguous_format, keep=2)
    first = buffers.take(4)
    first_memory = first.data_ptr()
    view = first[1:]
    del first
    second = buffers.take(4)
    assert second.data_ptr() != first_memory  # a view still holds the first
    del view
    third = buffers.take(3)  # smaller: the first buffer's rows serve it
    assert third.data_ptr() == first_memory
    assert third.shape == (3, 3, 8, 8)
    # Both kept buffers in use, and no room to keep another: a fresh one, not kept.
    fourth = buffers.take(4)
    assert fourth.data_ptr() not in (first_memory, second.data_ptr())


def test_batches_kept_by_the_caller_stay_intact(tree: Path) -> None:
    dataset = StreamedImages(stream(tree, workers=0), TRAIN)
    kept = collect(dataset, plan(1, steps=3))
    copies = [images.clone() for images, _ in kept]
    again = collect(dataset, plan(2, steps=3))
    assert all(torch.equal(images, copy) for (images, _), copy in zip(kept, copies, strict=True))
    assert not torch.equal(again[0][0], kept[0][0])


def held(dataset: StreamedImages, batch_plan: BatchPlan) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The batches, each held while the following ones are made (as the loop holds a step's
    inputs while the next batch is loaded), checked to be still what was handed out."""
    batches, copies = [], []
    for images, labels in dataset.batches(batch_plan):
        batches.append((images, labels))
        copies.append(images.clone())
    assert all(torch.equal(images, copy) for (images, _), copy in zip(batches, copies, strict=True))
    return batches


@pytest.mark.parametrize("workers", [1, 2])
def test_the_ranks_slices_of_a_step_are_the_one_process_batch_bit_for_bit(
    tree: Path, workers: int
) -> None:
    # 1 vs 2 processes at the loader: each rank its own stream, its rows of each step.
    order = epoch_order(48, 7, 1)
    one = held(
        StreamedImages(stream(tree, workers=0), TRAIN),
        TrainShard(48, BatchLayout(8, 1), 0).plan(order, 1, 0, 4),
    )
    ranks = [
        held(
            StreamedImages(stream(tree, workers=workers), TRAIN),
            TrainShard(48, BatchLayout(4, 2), rank).plan(order, 1, 0, 4),
        )
        for rank in (0, 1)
    ]
    for step, (images, labels) in enumerate(one):
        (first, first_labels), (second, second_labels) = ranks[0][step], ranks[1][step]
        assert torch.equal(torch.cat([first, second]), images)
        assert torch.equal(torch.cat([first_labels, second_labels]), labels)
    assert not torch.equal(one[0][0], one[1][0])


def test_batches_cut_into_more_chunks_than_slots_are_the_same(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = collect(StreamedImages(stream(tree, workers=0), TRAIN), plan(1, steps=4, per_rank=10))
    # Chunks of 3 samples: 4 per batch of 10 (3 + 3 + 3 + 1), 16 in all, through the
    # 2 x 2 + 1 = 5 slots of two workers, so every slot is written several times.
    monkeypatch.setattr(stream_module, "CHUNK", 3)
    chunked = StreamedImages(stream(tree, workers=2), TRAIN)
    assert chunked.stream._slots.shape[:2] == (5, 3)
    for (images, labels), (other_images, other_labels) in zip(
        whole, collect(chunked, plan(1, steps=4, per_rank=10)), strict=True
    ):
        assert torch.equal(images, other_images)
        assert torch.equal(labels, other_labels)


@pytest.mark.gpu
def test_on_a_gpu_the_batches_are_the_cpus_normalised_on_the_device(tree: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    device = torch.device("cuda")
    on_cpu = collect(StreamedImages(stream(tree, workers=2), TRAIN), plan(1))
    gpu_stream = ImageStream(
        views(tree), SIZE, seed=7, workers=2, skip_bad=False, device=device, channels_last=True
    )
    on_gpu = collect(StreamedImages(gpu_stream, TRAIN), plan(1))
    for (images, labels), (gpu_images, gpu_labels) in zip(on_cpu, on_gpu, strict=True):
        assert gpu_images.device.type == "cuda"
        assert gpu_images.is_contiguous(memory_format=torch.channels_last)
        # The same uint8 samples; x * a + b by numpy on the host, by a fused kernel on the GPU.
        assert torch.allclose(gpu_images.cpu(), images, atol=1e-5)
        assert torch.equal(gpu_labels.cpu(), labels)


def test_for_another_device_the_host_batch_goes_over_as_uint8(tree: Path) -> None:
    # The meta device stands in for a GPU here: the batch leaves the host as uint8 and is
    # normalised where it lands (its values are checked on a real GPU, above).
    meta = torch.device("meta")
    source = ImageStream(
        views(tree), SIZE, seed=7, workers=0, skip_bad=False, device=meta, channels_last=True
    )
    images, labels = collect(StreamedImages(source, TRAIN), plan(1, steps=1))[0]
    assert images.device == meta
    assert images.dtype == torch.float
    assert images.shape == (4, 3, SIZE, SIZE)
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert labels.device == meta
