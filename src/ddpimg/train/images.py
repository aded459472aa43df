"""Image datasets of the ``resnet`` trainer, held on the training device.

``--data synthetic``: ImageNet-shaped (3 x S x S, 1000 classes, 1,281,167 training and
50,000 evaluation samples) and generated on the device batch by batch, so it costs no
memory beyond a few small tensors and no host work per step. Sample i is a function of i
alone: its label comes from a hash of i, its image is the label's smooth colour pattern (a
random 3 x 8 x 8 grid upsampled to S x S) plus one of 64 fixed noise images. The patterns
and noise are drawn on the CPU from seeded generators and copied to the device, so every
rank, run and device type gets the same data. Labels are log-uniform (class k has
probability ln((k+2)/(k+1)) / ln(1001), Zipf-like) rather than balanced: a network first
learns the frequent classes, so the loss drops within a few steps even with small
batches, and then the patterns.

``--data DIR``: an ImageFolder tree in the ImageNet layout, ``DIR/train/CLASS/*.jpg`` and
``DIR/val/CLASS/*.jpg``. Every image is decoded once, resized (shorter side) and centre-
cropped to S x S, and kept as uint8 on the device: meant for small sets (S=224 costs 150 kB
an image), with no augmentation, so an epoch is a function of the seed alone.
``--train-samples N`` takes N images spread evenly over the sorted file list (so every
class keeps its share), not the first N (which would be the first classes only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ddpimg.errors import DataError
from ddpimg.train.seeding import derive_seed
from ddpimg.train.tasks.datasets import sample_count

IMAGENET_CLASSES = 1000
IMAGENET_TRAIN = 1_281_167
IMAGENET_EVAL = 50_000
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SPLITS = ("train", "val")
IMAGE_FOLDER_HINT = (
    "give a directory laid out as DIR/train/CLASS/*.jpg and DIR/val/CLASS/*.jpg (the "
    "ImageNet layout torchvision's ImageFolder reads), or --data synthetic"
)

_PATTERN_SIDE = 8
_NOISE_IMAGES = 64
_NOISE_SCALE = 0.5
# Knuth's multiplicative hash: neighbouring samples get unrelated labels.
_LABEL_HASH = 2_654_435_761
_HASH_RANGE = 2**32
_SYNTHETIC_SEED = 20_240_603


@dataclass(frozen=True)
class SyntheticImages:
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

    def batch(self, rows: torch.Tensor | slice) -> tuple[torch.Tensor, torch.Tensor]:
        """Images (N, 3, S, S), roughly zero-mean and unit-variance, and labels (N,)."""
        device = self.patterns.device
        if isinstance(rows, slice):
            index = torch.arange(rows.start, rows.stop, device=device)
        else:
            index = rows
        index = index + self.first
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


@dataclass(frozen=True)
class DecodedImages:
    """``images``: uint8 (N, 3, S, S); ``labels``: int64 (N,); ``mean`` and ``std``:
    (1, 3, 1, 1), ImageNet's; all on the device."""

    images: torch.Tensor
    labels: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    channels_last: bool

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def batch(self, rows: torch.Tensor | slice) -> tuple[torch.Tensor, torch.Tensor]:
        """Images normalised with ImageNet's mean and std, and labels."""
        images = (self.images[rows].float().div_(255.0) - self.mean) / self.std
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images, self.labels[rows]


@dataclass(frozen=True)
class ImageFolderData:
    train: DecodedImages
    eval: DecodedImages
    classes: list[str]


def load_image_folder(
    root: Path,
    image_size: int,
    *,
    train_samples: int | None,
    eval_samples: int | None,
    device: torch.device,
    channels_last: bool,
) -> ImageFolderData:
    """Decode ``root``/train and ``root``/val into memory (see the module docstring)."""
    classes = image_folder_classes(root)
    folders = [root / split for split in SPLITS]
    train_files = _list_images(folders[0])
    eval_files = _list_images(folders[1])
    train_count = sample_count(
        len(train_files), train_samples, "--train-samples", "training", str(folders[0])
    )
    eval_count = sample_count(
        len(eval_files), eval_samples, "--eval-samples", "evaluation", str(folders[1])
    )
    return ImageFolderData(
        _decode(_spread(train_files, train_count), image_size, device, channels_last),
        _decode(_spread(eval_files, eval_count), image_size, device, channels_last),
        classes,
    )


def image_folder_classes(root: Path) -> list[str]:
    """The class names of the ImageFolder tree ``root``, in label order; DataError when it
    is not laid out as ``root``/train/CLASS and ``root``/val/CLASS with the same classes."""
    if not root.is_dir():
        state = "is not a directory" if root.exists() else "does not exist"
        raise DataError(f"--data {root} {state}", hint=IMAGE_FOLDER_HINT)
    folders = [root / split for split in SPLITS]
    missing = [str(folder) for folder in folders if not folder.is_dir()]
    if missing:
        raise DataError(
            f"--data {root}: no {' and no '.join(missing)} directory", hint=IMAGE_FOLDER_HINT
        )
    classes, eval_classes = (_class_folders(folder) for folder in folders)
    if eval_classes != classes:
        only_train = sorted(set(classes) - set(eval_classes))[:5]
        only_eval = sorted(set(eval_classes) - set(classes))[:5]
        raise DataError(
            f"--data {root}: train/ and val/ have different class folders (only in train/: "
            f"{only_train or 'none'}, only in val/: {only_eval or 'none'})",
            hint="both splits need a folder for every class, even an empty one",
        )
    return classes


def _class_folders(folder: Path) -> list[str]:
    from torchvision.datasets.folder import find_classes

    try:
        classes, _ = find_classes(str(folder))
    except (FileNotFoundError, OSError) as err:
        raise DataError(f"--data: {folder}: {err}", hint=IMAGE_FOLDER_HINT) from err
    return list(classes)


def _list_images(folder: Path) -> list[tuple[str, int]]:
    from torchvision.datasets import ImageFolder

    try:
        dataset = ImageFolder(str(folder), allow_empty=True)
    except (FileNotFoundError, OSError) as err:
        raise DataError(f"--data: {folder}: {err}", hint=IMAGE_FOLDER_HINT) from err
    if not dataset.samples:
        raise DataError(f"--data: {folder} holds no image files", hint=IMAGE_FOLDER_HINT)
    return list(dataset.samples)


def _spread(files: list[tuple[str, int]], count: int) -> list[tuple[str, int]]:
    return [files[i * len(files) // count] for i in range(count)]


def _decode(
    files: list[tuple[str, int]], image_size: int, device: torch.device, channels_last: bool
) -> DecodedImages:
    from torchvision.datasets.folder import default_loader
    from torchvision.transforms.v2 import functional as TF

    images = torch.empty((len(files), 3, image_size, image_size), dtype=torch.uint8)
    for row, (path, _) in enumerate(files):
        try:
            # ImageFolder's own loader: PIL, converted to RGB.
            image = TF.pil_to_tensor(default_loader(path))
        except OSError as err:
            raise DataError(
                f"--data: {path} cannot be decoded as an image ({err})",
                hint="remove or replace the file",
            ) from err
        image = TF.resize(image, [image_size], antialias=True)
        images[row] = TF.center_crop(image, [image_size, image_size])
    labels = torch.tensor([label for _, label in files], dtype=torch.int64)
    return DecodedImages(
        images.to(device),
        labels.to(device),
        torch.tensor(MEAN, device=device).view(1, 3, 1, 1),
        torch.tensor(STD, device=device).view(1, 3, 1, 1),
        channels_last,
    )
