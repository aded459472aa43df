"""The ``resnet`` trainer's ``--data synthetic``: ImageNet-shaped (3 x S x S, 1000 classes,
1,281,167 training and 50,000 evaluation samples) and generated on the device batch by
batch, so it costs no
memory beyond a few small tensors and no host work per step. Sample i is a function of i
alone: its label comes from a hash of i, its image is the label's smooth colour pattern (a
random 3 x 8 x 8 grid upsampled to S x S) plus one of 64 fixed noise images. The patterns
and noise are drawn on the CPU from seeded generators and copied to the device, so every
rank, run and device type gets the same data. Labels are log-uniform (class k has
probability ln((k+2)/(k+1)) / ln(1001), Zipf-like) rather than balanced: a network first
learns the frequent classes, so the loss drops within a few steps even with small
batches, and then the patterns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ddpimg.train.seeding import derive_seed
from ddpimg.train.tasks.base import InMemoryDataset
from ddpimg.train.tasks.datasets import sample_count

IMAGENET_CLASSES = 1000
IMAGENET_TRAIN = 1_281_167
IMAGENET_EVAL = 50_000

_PATTERN_SIDE = 8
_NOISE_IMAGES = 64
_NOISE_SCALE = 0.5
# Knuth's multiplicative hash: neighbouring samples get unrelated labels.
_LABEL_HASH = 2_654_435_761
_HASH_RANGE = 2**32
_SYNTHETIC_SEED = 20_240_603


@dataclass(frozen=True)
class SyntheticImages(InMemoryDataset):
    """``count`` samples starting at sample ``first`` of the synthetic sequence; the
    evaluation split starts after the training one. ``patterns``: (classes, 3, 8, 8),
    ``noise``: (64, 3, S, S), both on the device."""

    count: int
    first: int
    patterns: torch.Tensor
    noise: torch.Tensor
    channels_last: bool

    def __len__(self) -> int:
        return self.count

    @property
    def device(self) -> torch.device:
        return self.patterns.device

    def batch(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Images (N, 3, S, S), roughly zero-mean and unit-variance, and labels (N,)."""
        index = rows + self.first
        labels = self.labels(index)
        side = self.noise.shape[-1]
        images = F.interpolate(
            self.patterns[labels], size=(side, side), mode="bilinear", align_corners=False
        )
        images.add_(self.noise[index % _NOISE_IMAGES], alpha=_NOISE_SCALE)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images, labels

    def labels(self, index: torch.Tensor) -> torch.Tensor:
        """The labels of the samples ``index`` of the whole synthetic sequence."""
        classes = self.patterns.shape[0]
        uniform = (index * _LABEL_HASH % _HASH_RANGE).double() / _HASH_RANGE
        return (torch.exp(uniform * math.log(classes + 1)).long() - 1).clamp_(0, classes - 1)


def synthetic_imagenet(
    image_size: int,
    *,
    train_samples: int | None,
    eval_samples: int | None,
    device: torch.device,
    channels_last: bool,
) -> tuple[SyntheticImages, SyntheticImages]:
    """The synthetic training and evaluation sets at ``image_size`` pixels."""
    source = "the synthetic ImageNet-shaped set"
    train = sample_count(IMAGENET_TRAIN, train_samples, "--train-samples", "training", source)
    test = sample_count(IMAGENET_EVAL, eval_samples, "--eval-samples", "evaluation", source)
    generator = torch.Generator()
    generator.manual_seed(derive_seed(_SYNTHETIC_SEED, "patterns"))
    patterns = torch.randn(
        (IMAGENET_CLASSES, 3, _PATTERN_SIDE, _PATTERN_SIDE), generator=generator
    ).to(device)
    generator.manual_seed(derive_seed(_SYNTHETIC_SEED, "noise", image_size))
    noise = torch.randn((_NOISE_IMAGES, 3, image_size, image_size), generator=generator).to(device)
    return (
        SyntheticImages(train, 0, patterns, noise, channels_last),
        SyntheticImages(test, IMAGENET_TRAIN, patterns, noise, channels_last),
    )
