"""Images read from storage batch by batch: the ``resnet`` trainer's ``--data DIR``.

Each rank loads only its own rows of each step (the ``BatchPlan`` the loop hands over), in
DataLoader worker processes (``--workers``) that read, decode and augment one sample each
(``transforms``); a batch travels as uint8, height x width x RGB, through shared memory,
is pinned (on a GPU), copied without blocking and normalised with ImageNet's mean and std
on the device, where it is channels_last (GPU) or contiguous (CPU). Memory per rank is
bounded by workers x prefetch x batch, whatever the dataset's size, and starting needs only
the index of the data (``ddpimg.data``), never a pass over it.

One set of workers serves both splits: a sample's key says which split, which epoch (its
augmentation draws come from (seed, epoch, index), ``None`` for evaluation) and which
sample. So the trajectory does not depend on the number of processes or workers.

A sample that cannot be read or decoded is an error naming the sample and its file, unless
``--bad-samples skip``: then the next readable sample in index order (wrapping around)
takes its place, deterministically, and the summary counts the replacements.
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from PIL import Image

from ddpimg.errors import DataError
from ddpimg.train.seeding import derive_seed
from ddpimg.train.tasks.resnet.transforms import EvalPreset, TrainPreset

if TYPE_CHECKING:
    from ddpimg.data.images import ImageSource
    from ddpimg.train.sharding import BatchPlan
    from ddpimg.train.tasks.base import Batch

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
TRAIN, EVAL = 0, 1
# Batches each worker keeps ready: DataLoader's default.
PREFETCH = 2
# How far ``--bad-samples skip`` looks for a readable substitute before giving up.
SUBSTITUTE_TRIES = 16
BAD_SAMPLE_HINT = (
    "replace or remove the file (then the index is rebuilt), or pass --bad-samples skip to "
    "train on with a substitute sample"
)
# What PIL and a storage read raise for a file that is not a (whole) image.
_DECODE_ERRORS = (
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    struct.error,
    zlib.error,
    Image.DecompressionBombError,
)

Key = tuple[int, int | None, int]  # (split, epoch or None, sample index)


@dataclass(frozen=True)
class SplitView:
    """The samples of a split that a run uses: ``source`` sample ``subset[i]`` is sample
    i (all of them, in order, when ``subset`` is None)."""

    source: ImageSource
    subset: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.source) if self.subset is None else len(self.subset)

    def source_index(self, index: int) -> int:
        return index if self.subset is None else int(self.subset[index])

    def label(self, index: int) -> int:
        return int(self.source.labels()[self.source_index(index)])


def spread(total: int, count: int) -> np.ndarray | None:
    """``count`` of ``total`` samples spread evenly over the index (so every class of a
    sorted tree keeps its share); None for all of them."""
    if count >= total:
        return None
    return (np.arange(count, dtype=np.int64) * total) // count


@dataclass
class _Sample:
    pixels: np.ndarray | None  # height x width x 3, uint8; None when unreadable
    label: int
    error: str | None = None
    substituted: bool = False


@dataclass
class ImageBatch:
    """What a worker hands to the main process: ``images`` uint8 (B, S, S, 3), ``labels``
    int64 (B,), the errors of unreadable samples, and how many samples were substituted."""

    images: torch.Tensor
    labels: torch.Tensor
    errors: list[str]
    substituted: int

    def pin_memory(self) -> ImageBatch:
        """DataLoader's pin-memory thread calls this (its protocol for custom batches)."""
        return ImageBatch(
            self.images.pin_memory(), self.labels.pin_memory(), self.errors, self.substituted
        )


class SampleReader(torch.utils.data.Dataset[_Sample]):
    """What the DataLoader's workers run: a key to one decoded, augmented sample."""

    def __init__(
        self, views: Sequence[SplitView], image_size: int, seed: int, skip_bad: bool
    ) -> None:
        self.views = tuple(views)
        self.presets = (TrainPreset(image_size), EvalPreset(image_size))
        self.seed = seed
        self.skip_bad = skip_bad

    def __getitem__(self, key: Key) -> _Sample:
        split, epoch, index = key
        view = self.views[split]
        try:
            return _Sample(self._pixels(split, epoch, index), view.label(index))
        except _DECODE_ERRORS as err:
            problem = self._describe(view, index, err)
        if not self.skip_bad:
            return _Sample(None, view.label(index), error=problem)
        for step in range(1, SUBSTITUTE_TRIES + 1):
            other = (index + step) % len(view)
            try:
                pixels = self._pixels(split, epoch, other)
            except _DECODE_ERRORS:
                continue
            return _Sample(pixels, view.label(other), substituted=True)
        return _Sample(
            None,
            view.label(index),
            error=f"{problem}, and the next {SUBSTITUTE_TRIES} samples cannot be read either",
        )

    def _pixels(self, split: int, epoch: int | None, index: int) -> np.ndarray:
        view = self.views[split]
        data = view.source.read(view.source_index(index))
        rng = None
        if epoch is not None:
            rng = random.Random(derive_seed(self.seed, "augment", epoch, index))
        with Image.open(io.BytesIO(data)) as image:
            return self.presets[split](image, rng)

    @staticmethod
    def _describe(view: SplitView, index: int, err: BaseException) -> str:
        reason = str(err) or type(err).__name__
        where = view.source.where(view.source_index(index))
        return f"sample {index} ({where}) cannot be read as an image: {reason}"

    def __len__(self) -> int:
        return sum(len(view) for view in self.views)


class _Collate:
    def __init__(self, image_size: int) -> None:
        self.image_size = image_size

    def __call__(self, samples: list[_Sample]) -> ImageBatch:
        side = self.image_size
        images = np.zeros((len(samples), side, side, 3), dtype=np.uint8)
        for row, sample in enumerate(samples):
            if sample.pixels is not None:
                images[row] = sample.pixels
        return ImageBatch(
            torch.from_numpy(images),
            torch.tensor([sample.label for sample in samples], dtype=torch.int64),
            [sample.error for sample in samples if sample.error is not None],
            sum(sample.substituted for sample in samples),
        )


class _PlanSampler:
    """The DataLoader's batch sampler: the keys of the current plan's batches. The loader
    iterates it in the main process, so setting the next plan between iterations is enough,
    also with persistent workers."""

    def __init__(self) -> None:
        self.split = TRAIN
        self.plan: BatchPlan | None = None

    def __iter__(self) -> Iterator[list[Key]]:
        plan = self.plan
        if plan is None:
            return
        for batch in range(len(plan)):
            yield [(self.split, plan.epoch, int(index)) for index in plan.rows(batch).tolist()]

    def __len__(self) -> int:
        return 0 if self.plan is None else len(self.plan)


class ImageStream:
    """The DataLoader (and its workers) shared by a run's two splits."""

    def __init__(
        self,
        views: tuple[SplitView, SplitView],
        image_size: int,
        *,
        seed: int,
        workers: int,
        skip_bad: bool,
        device: torch.device,
        channels_last: bool,
    ) -> None:
        self.views = views
        self.skip_bad = skip_bad
        self.device = device
        self.channels_last = channels_last
        self.substituted = [0, 0]
        self._sampler = _PlanSampler()
        self._loader = torch.utils.data.DataLoader(
            SampleReader(views, image_size, seed, skip_bad),
            batch_sampler=self._sampler,
            num_workers=workers,
            collate_fn=_Collate(image_size),
            pin_memory=device.type == "cuda",
            persistent_workers=workers > 0,
            prefetch_factor=PREFETCH if workers else None,
        )
        scale = 255.0 * torch.tensor(STD, device=device).view(1, 3, 1, 1)
        self._shift = 255.0 * torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
        self._factor = 1.0 / scale

    def batches(self, split: int, plan: BatchPlan) -> Generator[Batch]:
        self._sampler.split, self._sampler.plan = split, plan
        for batch in self._loader:
            if batch.errors:
                raise DataError(batch.errors[0], hint=BAD_SAMPLE_HINT)
            self.substituted[split] += batch.substituted
            yield self._on_device(batch)

    def _on_device(self, batch: ImageBatch) -> Batch:
        images = batch.images.to(self.device, non_blocking=True)
        labels = batch.labels.to(self.device, non_blocking=True)
        # (B, S, S, 3) viewed as (B, 3, S, S) is channels_last memory. The float copy is made
        # in the model's layout in one pass: converting, then reordering the floats with
        # .contiguous() took 3x as long on the CPU (18 vs 6 ms for 32 images of 224 px).
        layout = torch.channels_last if self.channels_last else torch.contiguous_format
        pixels = images.permute(0, 3, 1, 2).to(torch.float, memory_format=layout)
        return pixels.sub_(self._shift).mul_(self._factor), labels


@dataclass(frozen=True)
class StreamedImages:
    """One split of an ``ImageStream``: a ``Dataset`` for the loop."""

    stream: ImageStream
    split: int

    def __len__(self) -> int:
        return len(self.stream.views[self.split])

    def batches(self, plan: BatchPlan) -> Generator[Batch]:
        return self.stream.batches(self.split, plan)

    def skipped(self) -> int:
        return self.stream.substituted[self.split]
