"""The image presets of torchvision's ImageNet recipe (``references/classification/
presets.py``), done the cheap way, on uint8 data.

Training: RandomResizedCrop to S x S (scale 0.08-1, aspect ratio 3/4-4/3, torchvision's ten
tries and its centre-crop fallback), then a horizontal flip with probability 1/2.
Evaluation: the shorter side resized to S x 256/224, the centre S x S cropped.

Each preset decodes, crops and resizes in one pass: the crop box goes to PIL's ``resize``
(antialiased, as torchvision's resize of PIL images is), so no full-size intermediate is
made; and a JPEG whose crop is at least twice the output size is decoded at 1/2, 1/4 or 1/8
scale by the JPEG decoder itself (PIL's draft mode), which skips most of the decoding work.
The result stays uint8, height x width x RGB: normalisation happens on the training device.

Randomness: a preset takes a ``random.Random`` seeded by the caller from (seed, epoch,
sample index), so a sample's crop and flip do not depend on which rank or worker loads it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
from PIL import Image

SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
CROP_TRIES = 10
# torchvision's evaluation preset: resize to 256, centre crop 224.
EVAL_RESIZE_RATIO = 256 / 224
_DRAFT_SCALES = (8, 4, 2)

Box = tuple[float, float, float, float]


def crop_box(width: int, height: int, rng: random.Random) -> Box:
    """RandomResizedCrop's box (left, top, right, bottom) in an image of that size, drawn
    as torchvision's ``RandomResizedCrop.get_params`` draws it."""
    area = width * height
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(CROP_TRIES):
        target_area = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = rng.randint(0, height - h)
            left = rng.randint(0, width - w)
            return (left, top, left + w, top + h)
    ratio = width / height
    if ratio < RATIO[0]:
        w, h = width, round(width / RATIO[0])
    elif ratio > RATIO[1]:
        w, h = round(height * RATIO[1]), height
    else:
        w, h = width, height
    top, left = (height - h) // 2, (width - w) // 2
    return (left, top, left + w, top + h)


def centre_box(width: int, height: int, size: int) -> Box:
    """The region of the original image that resize-to-``size`` x 256/224 then centre crop
    ``size`` keeps."""
    side = min(width, height) / EVAL_RESIZE_RATIO
    left, top = (width - side) / 2, (height - side) / 2
    return (left, top, left + side, top + side)


def resized_region(image: Image.Image, box: Box, size: int) -> Image.Image:
    """``box`` of the (not yet decoded) ``image`` resized to ``size`` x ``size``, in RGB."""
    reduce = min(box[2] - box[0], box[3] - box[1]) / size
    if image.format == "JPEG" and reduce >= 2:
        scale = next(s for s in _DRAFT_SCALES if reduce >= s)
        width, height = image.size
        drafted = image.draft("RGB", (width // scale, height // scale))
        if drafted is not None:
            factor = width / drafted[1][2]
            box = (box[0] / factor, box[1] / factor, box[2] / factor, box[3] / factor)
    # Resampling a palette image would mix palette indices; CMYK, alpha and 16-bit images are
    # made RGB as torchvision's loader makes them. RGB and greyscale are resized as they are.
    if image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    resized = image.resize((size, size), Image.Resampling.BILINEAR, box=box)
    return resized if resized.mode == "RGB" else resized.convert("RGB")


@dataclass(frozen=True)
class TrainPreset:
    """RandomResizedCrop to ``size`` and a random horizontal flip."""

    size: int

    def __call__(self, image: Image.Image, rng: random.Random | None) -> np.ndarray:
        if rng is None:
            raise ValueError("the training preset needs a random generator")
        width, height = image.size
        region = resized_region(image, crop_box(width, height, rng), self.size)
        if rng.random() < 0.5:
            region = region.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return np.asarray(region)


@dataclass(frozen=True)
class EvalPreset:
    """Resize to ``size`` x 256/224 and centre crop ``size``; draws nothing."""

    size: int

    def __call__(self, image: Image.Image, rng: random.Random | None) -> np.ndarray:
        width, height = image.size
        return np.asarray(resized_region(image, centre_box(width, height, self.size), self.size))
