"""Images read from storage batch by batch: the ``resnet`` trainer's ``--data DIR``.

Each rank loads only its own rows of each step (the ``BatchPlan`` the loop hands over), in
DataLoader worker processes (``--workers``) that read, decode and augment (``transforms``)
chunks of up to ``CHUNK`` samples, each sample straight into a row of a shared-memory slot.
The main process turns the uint8 rows (height x width x RGB) into the batch the model takes,
normalised with ImageNet's mean and std: in one pass into a float batch on the CPU, or
through a pinned buffer copied without blocking and normalised on the GPU, channels_last
(GPU) or contiguous (CPU). Memory per rank is bounded by workers x prefetch x chunk (and,
on the CPU, two float batches kept for reuse), whatever the dataset's size, and starting
needs only the index of the data (``ddpimg.data``), never a pass over it.

One set of workers serves both splits: a sample's key says which split, which epoch (its
augmentation draws come from (seed, epoch, index), ``None`` for evaluation) and which
sample. So the trajectory does not depend on the number of processes or workers.

A sample that cannot be read or decoded is an error naming the sample and its file, unless
``--bad-samples skip``: then the next readable sample in index order (wrapping around)
takes its place, deterministically, and the summary counts the replacements.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from PIL import Image

from ddpimg.errors import DataError
from ddpimg.train.seeding import derive_seed
from ddpimg.train.tasks.resnet.transforms import EvalPreset, TrainPreset, render

if TYPE_CHECKING:
    from ddpimg.data.images import ImageSource
    from ddpimg.train.sharding import BatchPlan
    from ddpimg.train.tasks.base import Batch

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
TRAIN, EVAL = 0, 1
# Samples a worker loads as one task: a batch is cut into chunks of this many.
CHUNK = 32
# Chunks each worker keeps ready (DataLoader's default prefetch factor).
PREFETCH = 2
# Float batches the CPU path keeps for reuse: the loop holds one while the next is made.
KEPT_BATCHES = 2
# How far ``--bad-samples skip`` looks for a readable substitute before giving up.
SUBSTITUTE_TRIES = 16
BAD_SAMPLE_HINT = (
    "replace or remove the file (then the index is rebuilt), or pass --bad-samples skip to "
    "train on with a substitute sample"
)
# What PIL, libjpeg-turbo (simplejpeg) and a storage read raise for a file that is not a
# (whole) image.
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

    def labels(self, indices: np.ndarray) -> np.ndarray:
        """The labels of samples ``indices``, int64 (a new array)."""
        rows = indices if self.subset is None else self.subset[indices]
        return np.asarray(self.source.labels()[rows], dtype=np.int64)


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


@dataclass(frozen=True)
class Chunk:
    """A worker's task: samples ``indices`` of ``split`` (for ``epoch``, None for
    evaluation), to be written into the rows of shared slot ``slot``."""

    split: int
    epoch: int | None
    slot: int
    indices: np.ndarray  # int64


@dataclass(frozen=True)
class Loaded:
    """What a worker hands back for a ``Chunk``: its slot holds the pixels, and these the
    labels, the errors of unreadable samples and how many samples were substituted."""

    slot: int
    labels: np.ndarray  # int64
    errors: list[str]
    substituted: int


class SampleReader(torch.utils.data.Dataset[_Sample]):
    """What the DataLoader's workers run: a ``Chunk`` of keys to decoded, augmented samples
    written into ``slots`` (``__getitems__``), or one key to one sample (``__getitem__``)."""

    def __init__(
        self,
        views: Sequence[SplitView],
        image_size: int,
        seed: int,
        skip_bad: bool,
        slots: torch.Tensor | None = None,
    ) -> None:
        self.views = tuple(views)
        self.presets = (TrainPreset(image_size), EvalPreset(image_size))
        self.seed = seed
        self.skip_bad = skip_bad
        self.image_size = image_size
        self.slots = slots

    def __getitems__(self, chunks: list[Chunk]) -> list[Loaded]:
        """The DataLoader's batch of keys is one ``Chunk`` (see ``_PlanSampler``)."""
        return [self.load_chunk(chunk) for chunk in chunks]

    def load_chunk(self, chunk: Chunk) -> Loaded:
        if self.slots is None:
            raise ValueError("a SampleReader without slots reads single samples only")
        rows = self.slots[chunk.slot].numpy()
        labels = self.views[chunk.split].labels(chunk.indices)
        errors: list[str] = []
        substituted = 0
        for row, index in enumerate(chunk.indices.tolist()):
            outcome = self._load(chunk.split, chunk.epoch, index, rows[row])
            if isinstance(outcome, str):
                errors.append(outcome)
            elif outcome != index:
                labels[row] = self.views[chunk.split].label(outcome)
                substituted += 1
        return Loaded(chunk.slot, labels, errors, substituted)

    def __getitem__(self, key: Key) -> _Sample:
        split, epoch, index = key
        side = self.image_size
        pixels = np.empty((side, side, 3), dtype=np.uint8)
        outcome = self._load(split, epoch, index, pixels)
        view = self.views[split]
        if isinstance(outcome, str):
            return _Sample(None, view.label(index), error=outcome)
        return _Sample(pixels, view.label(outcome), substituted=outcome != index)

    def _load(self, split: int, epoch: int | None, index: int, out: np.ndarray) -> int | str:
        """Write sample ``index`` into ``out``: the index of the sample written (another one
        when it was substituted), or the error naming it."""
        view = self.views[split]
        try:
            self._render(split, epoch, index, out)
            return index
        except _DECODE_ERRORS as err:
            problem = self._describe(view, index, err)
        if not self.skip_bad:
            return problem
        for step in range(1, SUBSTITUTE_TRIES + 1):
            other = (index + step) % len(view)
            try:
                self._render(split, epoch, other, out)
            except _DECODE_ERRORS:
                continue
            return other
        return f"{problem}, and the next {SUBSTITUTE_TRIES} samples cannot be read either"

    def _render(self, split: int, epoch: int | None, index: int, out: np.ndarray) -> None:
        view = self.views[split]
        data = view.source.read(view.source_index(index))
        rng = None
        if epoch is not None:
            rng = random.Random(derive_seed(self.seed, "augment", epoch, index))
        render(data, self.presets[split], rng, out)

    @staticmethod
    def _describe(view: SplitView, index: int, err: BaseException) -> str:
        reason = str(err) or type(err).__name__
        where = view.source.where(view.source_index(index))
        return f"sample {index} ({where}) cannot be read as an image: {reason}"

    def __len__(self) -> int:
        return sum(len(view) for view in self.views)


def _as_loaded(loaded: list[Loaded]) -> Loaded:
    """The DataLoader's collate function: a worker's chunk is in its slot already (a
    module-level function, so that workers started by spawn or forkserver can unpickle it)."""
    return loaded[0]


class _PlanSampler:
    """The DataLoader's batch sampler: the current plan's batches cut into chunks of at most
    ``CHUNK`` samples, each given the next slot in turn, one chunk a DataLoader batch. The
    loader iterates it in the main process, so setting the next plan between iterations is
    enough, also with persistent workers. A slot is reused ``slot_count`` chunks later: by
    then the main process has taken the chunk out of it (see ``ImageStream``)."""

    def __init__(self, slot_count: int) -> None:
        self.slot_count = slot_count
        self.split = TRAIN
        self.plan: BatchPlan | None = None

    def __iter__(self) -> Iterator[list[Chunk]]:
        plan = self.plan
        if plan is None:
            return
        sent = 0
        for batch in range(len(plan)):
            rows = plan.rows(batch).numpy()
            for start in range(0, len(rows), CHUNK):
                slot = sent % self.slot_count
                yield [Chunk(self.split, plan.epoch, slot, rows[start : start + CHUNK])]
                sent += 1

    def __len__(self) -> int:
        plan = self.plan
        if plan is None:
            return 0
        return sum(-(-len(plan.rows(batch)) // CHUNK) for batch in range(len(plan)))


def _storage_users(tensor: torch.Tensor) -> Callable[[], int] | None:
    """How many tensors and views refer to ``tensor``'s memory, as a function (torch's own
    count, which its CUDA graph trees read to tell whether an output is still used); None
    where this torch has no such count."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    if count is None:
        return None
    cdata = tensor.untyped_storage()._cdata
    return lambda: int(count(cdata))


class BatchBuffers:
    """Float batches for the CPU, reused once nothing refers to them any more.

    A fresh batch of 32 x 3 x 224 x 224 floats (19 MB) costs a page fault and a zeroed page
    for every 4 KiB written, about as much as normalising into it: glibc maps an allocation
    that large anew each time, and unmaps it when it is freed. A kept buffer is handed out
    again only when torch counts no tensor or view on its memory but the buffer itself (the
    loop, autograd or a caller's list of batches still holding it count), so reuse is never
    visible; otherwise a fresh batch is made."""

    def __init__(self, side: int, layout: torch.memory_format, keep: int = KEPT_BATCHES) -> None:
        self.side = side
        self.layout = layout
        self.keep = keep
        self._kept: list[tuple[torch.Tensor, Callable[[], int], int]] = []

    def take(self, count: int) -> torch.Tensor:
        free = [entry for entry in self._kept if entry[1]() == entry[2]]
        for buffer, _, _ in free:
            if len(buffer) >= count:
                return buffer[:count]
        batch = torch.empty((count, 3, self.side, self.side), memory_format=self.layout)
        users = _storage_users(batch)
        if users is None:
            return batch
        if len(self._kept) >= self.keep:
            if not free:
                return batch
            self._kept.remove(free[0])
        self._kept.append((batch, users, users()))
        return batch[:count]


class ImageStream:
    """The DataLoader (and its workers) shared by a run's two splits, and the shared-memory
    slots its workers write samples into.

    A batch is loaded as chunks of at most ``CHUNK`` samples, one task each, so a large
    evaluation batch is spread over the workers and the memory held does not depend on the
    batch size. A worker decodes each sample of its chunk straight into a row of the slot
    the chunk names and sends back only the labels; nothing is collated or pickled. The
    main process turns each chunk's uint8 rows into normalised floats in the batch it
    yields (``(x - 255 mean) / (255 std)`` as ``x * a + b``, by numpy: one thread, no
    intra-op pool waking up and spinning for it; into ``BatchBuffers``), or on a GPU
    copies them into a pinned batch that goes to the device without blocking and is
    normalised there.

    Why ``PREFETCH x workers + 1`` slots are enough: the DataLoader keeps at most
    ``PREFETCH x workers`` chunks in flight and sends the next one each time it hands one
    over, so while the main process holds chunk n, chunks up to n + PREFETCH x workers may
    be written; chunk n's slot is written again only once chunk n + 1 was asked for, when
    chunk n is in the batch already. A persistent worker's stale chunks (of a plan
    abandoned half-way) are finished and dropped before the next plan's first chunk is
    sent (the DataLoader's reset waits for every worker).
    """

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
        self.layout = torch.channels_last if channels_last else torch.contiguous_format
        self.substituted = [0, 0]
        slot_count = PREFETCH * workers + 1
        side = image_size
        self._slots = torch.empty((slot_count, CHUNK, side, side, 3), dtype=torch.uint8)
        if workers:
            self._slots.share_memory_()  # type: ignore[no-untyped-call]
        self._sampler = _PlanSampler(slot_count)
        self._loader = torch.utils.data.DataLoader(
            SampleReader(views, image_size, seed, skip_bad, self._slots),
            batch_sampler=self._sampler,
            num_workers=workers,
            collate_fn=_as_loaded,
            persistent_workers=workers > 0,
            prefetch_factor=PREFETCH if workers else None,
        )
        std = torch.tensor(STD).view(1, 3, 1, 1)
        factor, bias = 1.0 / (255.0 * std), -torch.tensor(MEAN).view(1, 3, 1, 1) / std
        self._factor, self._bias = factor.to(device), bias.to(device)
        self._host_factor, self._host_bias = factor.numpy(), bias.numpy()
        self._scratch = np.empty((side, side, 3), dtype=np.float32)
        self._buffers = BatchBuffers(side, self.layout)

    def batches(self, split: int, plan: BatchPlan) -> Generator[Batch]:
        self._sampler.split, self._sampler.plan = split, plan
        chunks = iter(self._loader)
        on_host = self.device.type == "cpu"
        side = self._slots.shape[2]
        for batch in range(len(plan)):
            count = len(plan.rows(batch))
            labels = torch.empty(count, dtype=torch.int64)
            if on_host:
                target = self._buffers.take(count)
            else:
                target = torch.empty(
                    (count, side, side, 3), dtype=torch.uint8, pin_memory=self.device.type == "cuda"
                )
            rows_of = target.numpy()
            for start in range(0, count, CHUNK):
                loaded: Loaded = next(chunks)
                if loaded.errors:
                    raise DataError(loaded.errors[0], hint=BAD_SAMPLE_HINT)
                self.substituted[split] += loaded.substituted
                rows = slice(start, start + len(loaded.labels))
                labels[rows] = torch.from_numpy(loaded.labels)
                pixels = self._slots[loaded.slot, : len(loaded.labels)].numpy()
                if on_host:
                    self._normalise_on_host(pixels, rows_of[rows])
                else:
                    np.copyto(rows_of[rows], pixels)
            yield self._on_device(target, labels) if not on_host else (target, labels)

    def _normalise_on_host(self, pixels: np.ndarray, out: np.ndarray) -> None:
        """uint8 (B, S, S, 3) into float ``out`` (B, 3, S, S) in ``out``'s layout: the
        floats are written in the model's layout directly (reordering them afterwards took
        3x as long). One sample at a time, converted to float as it lies first (a
        contiguous, vectorised pass into a kept buffer that stays in the cache), then
        scaled into ``out`` and shifted there while that sample is still cached: 0.12-0.17
        ms a sample against 0.20-0.26 for the whole batch converted while reordered and
        then shifted (measured on the 2-core VM; the same values, bitwise)."""
        factor, bias = self._host_factor[0], self._host_bias[0]
        scratch = self._scratch
        for sample, target in zip(pixels, out, strict=True):
            np.copyto(scratch, sample, casting="unsafe")
            np.multiply(scratch.transpose(2, 0, 1), factor, out=target)
            np.add(target, bias, out=target)

    def _on_device(self, pinned: torch.Tensor, labels: torch.Tensor) -> Batch:
        pixels = pinned.to(self.device, non_blocking=True)
        images = torch.empty(
            (len(labels), 3, pixels.shape[1], pixels.shape[2]),
            device=self.device,
            memory_format=self.layout,
        )
        # (B, S, S, 3) viewed as (B, 3, S, S) is channels_last memory.
        torch.addcmul(self._bias, pixels.permute(0, 3, 1, 2), self._factor, out=images)
        return images, labels.to(self.device, non_blocking=True)


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
