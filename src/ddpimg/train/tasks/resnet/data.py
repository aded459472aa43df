"""Where the ``resnet`` trainer's images come from: ``--data synthetic`` (``synthetic``,
generated on the device) or a dataset directory (an ImageFolder tree or tar shards, see
``ddpimg.data``) streamed from storage by ``stream``.

For a directory, rank 0 makes sure its index exists (listing or scanning it once, reported
on stderr) while the other ranks wait; then every rank opens the index. ``--train-samples``
and ``--eval-samples`` take that many samples spread evenly over the index (so every class
of a sorted tree keeps its share), not the first ones (which would be the first classes).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ddpimg.data.sources import open_splits, prepare
from ddpimg.train.config import SYNTHETIC
from ddpimg.train.coordination import prepare_on_main
from ddpimg.train.tasks.datasets import sample_count
from ddpimg.train.tasks.resnet.options import ResnetOptions
from ddpimg.train.tasks.resnet.stream import (
    EVAL,
    TRAIN,
    ImageStream,
    SplitView,
    StreamedImages,
    spread,
)
from ddpimg.train.tasks.resnet.synthetic import IMAGENET_CLASSES, synthetic_imagenet

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Dataset


@dataclass(frozen=True)
class ImageData:
    """A run's two splits, its class names, and what the manifest records about them."""

    train: Dataset
    eval: Dataset
    num_classes: int
    facts: dict[str, Any]


def load_images(config: TrainConfig, ctx: DistContext, image_size: int) -> ImageData:
    channels_last = ctx.device.type == "cuda"
    if config.data == SYNTHETIC:
        train, test = synthetic_imagenet(
            image_size,
            train_samples=config.train_samples,
            eval_samples=config.first_eval_samples,
            device=ctx.device,
            channels_last=channels_last,
        )
        facts = {"source": "synthetic", "train_samples": len(train), "eval_samples": len(test)}
        return ImageData(train, test, IMAGENET_CLASSES, facts)
    root = Path(config.data)
    prepare_on_main(ctx, lambda: prepare(root, config.out, sys.stderr))
    train_source, eval_source = open_splits(root, config.out)
    train_view = SplitView(
        train_source,
        spread(
            len(train_source),
            sample_count(
                len(train_source), config.train_samples, "--train-samples", "training", str(root)
            ),
        ),
    )
    eval_view = SplitView(
        eval_source,
        spread(
            len(eval_source),
            sample_count(
                len(eval_source),
                config.first_eval_samples,
                "--eval-samples",
                "evaluation",
                str(root),
            ),
        ),
    )
    options = ResnetOptions.of(config)
    share = ctx.cpu_share
    workers = share.workers if options.workers is None else options.workers
    if ctx.cpu_threads_from_share and workers:
        # Training on the CPU: the loader workers take their CPUs out of the rank's share,
        # or the training threads and the workers together oversubscribe it.
        torch.set_num_threads(max(1, share.cpus - workers))
    stream = ImageStream(
        (train_view, eval_view),
        image_size,
        seed=config.seed,
        workers=workers,
        skip_bad=options.bad_samples == "skip",
        device=ctx.device,
        channels_last=channels_last,
    )
    facts = {
        "source": str(root.resolve()),
        "layout": train_source.kind,
        "train_samples": len(train_view),
        "eval_samples": len(eval_view),
        "classes": len(train_source.classes),
        "workers": workers,
        "workers_from": "--workers" if options.workers is not None else "cpus - 1",
        "cpus": share.cpus,
        "cpus_from": share.source,
    }
    return ImageData(
        StreamedImages(stream, TRAIN),
        StreamedImages(stream, EVAL),
        len(train_source.classes),
        facts,
    )
