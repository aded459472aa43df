"""The image presets of torchvision's ImageNet recipe (``references/classification/
presets.py``), done the cheap way, on uint8 data, written straight into a batch.

Training: RandomResizedCrop to S x S (scale 0.08-1, aspect ratio 3/4-4/3, torchvision's ten
tries and its centre-crop fallback), then a horizontal flip with probability 1/2.
Evaluation: the shorter side resized to S x 256/224, the centre S x S cropped.

Each sample is decoded, cropped and resized in one pass (``render``):

* A JPEG is decoded by libjpeg-turbo through ``simplejpeg`` at the smallest DCT scale that
  still covers the region at S x S (1/2, 1/4 or 1/8 of each side): the decoder then skips
  most of the inverse DCT, the colour conversion and the memory traffic of the pixels it
  would throw away. Smaller-than-full scales other than powers of two (3/8, 5/8, ...) are
  not used: libjpeg-turbo has no SIMD code for them, and they decode slower than the full
  image. A JPEG the strict decoder refuses (a recoverable error libjpeg only warns about,
  or a damaged file) goes to PIL, which decides as torchvision's loader would: it accepts
  what libjpeg accepts and raises for a truncated file.
* Anything else (PNG, BMP, WebP, ...) is decoded by PIL and made RGB as torchvision's loader
  makes it (palette, alpha, CMYK, 16-bit).
* The region is resized by torch's antialiased bilinear kernel on uint8 (the one
  torchvision's ``Resize(antialias=True)`` runs on tensors; vectorised with AVX2 on
  x86-64), into the batch's row, flipped on the way when drawn. Only the region is
  resized, never the whole image.

Randomness: a preset takes a ``random.Random`` seeded by the caller from (seed, epoch,
sample index), so a sample's crop and flip do not depend on which rank or worker loads it,
nor on the scale its JPEG was decoded at.
"""

from __future__ import annotations

import io
import math
import random
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import simplejpeg
import torch
from PIL import Image

from ddpimg.data.images import check_pixels

SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
CROP_TRIES = 10
# torchvision's evaluation preset: resize to 256, centre crop 224.
EVAL_RESIZE_RATIO = 256 / 224
# The DCT scales (a side divided by) that libjpeg-turbo decodes with SIMD code.
_DCT_REDUCTIONS = (8, 4, 2)
_JPEG_START = b"\xff\xd8"

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
    """The region of the original image that torchvision's evaluation preset keeps: the
    shorter side resized to ``size`` x 256/224 (the longer in proportion, truncated, as
    ``Resize`` does), then the centre ``size`` x ``size`` cropped (its offset rounded, as
    ``CenterCrop`` does), in the original's pixels."""
    short = round(size * EVAL_RESIZE_RATIO)
    if width <= height:
        resized_width, resized_height = short, int(short * height / width)
    else:
        resized_width, resized_height = int(short * width / height), short
    left = round((resized_width - size) / 2)
    top = round((resized_height - size) / 2)
    scale_x, scale_y = width / resized_width, height / resized_height
    return (left * scale_x, top * scale_y, (left + size) * scale_x, (top + size) * scale_y)


class Preset(Protocol):
    """Where a sample's region lies in an image of a given size, and whether it is flipped."""

    @property
    def size(self) -> int:
        """The side of the square output."""
        ...

    def region(self, width: int, height: int, rng: random.Random | None) -> tuple[Box, bool]: ...


@dataclass(frozen=True)
class TrainPreset:
    """RandomResizedCrop to ``size`` and a random horizontal flip, drawn in that order."""

    size: int

    def region(self, width: int, height: int, rng: random.Random | None) -> tuple[Box, bool]:
        if rng is None:
            raise ValueError("the training preset needs a random generator")
        box = crop_box(width, height, rng)
        return box, rng.random() < 0.5


@dataclass(frozen=True)
class EvalPreset:
    """Resize to ``size`` x 256/224 and centre crop ``size``; draws nothing."""

    size: int

    def region(self, width: int, height: int, rng: random.Random | None) -> tuple[Box, bool]:
        return centre_box(width, height, self.size), False


def dct_reduction(box: Box, size: int) -> int:
    """The largest of 8, 4, 2 that a side of the image can be divided by while ``box``
    stays at least ``size`` wide and high (1 when none can)."""
    shortest = min(box[2] - box[0], box[3] - box[1])
    return next((factor for factor in _DCT_REDUCTIONS if shortest >= factor * size), 1)


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a JPEG that libjpeg-turbo can read; None for anything else.
    PIL's DecompressionBombError for one larger than PIL would open (a file can claim any
    size in its header)."""
    if not data.startswith(_JPEG_START):
        return None
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    check_pixels(width, height)
    return width, height


def _turbo_pixels(data: bytes, width: int, height: int, reduction: int) -> np.ndarray:
    """The JPEG decoded as RGB with each side divided by ``reduction`` (rounded up, as
    libjpeg-turbo scales); ValueError for anything its strict mode refuses."""
    pixels: np.ndarray = simplejpeg.decode_jpeg(
        data,
        colorspace="RGB",
        min_width=-(-width // reduction),
        min_height=-(-height // reduction),
    )
    return pixels


def _pil_pixels(data: bytes, box: Box, size: int) -> np.ndarray:
    """The image decoded by PIL as RGB, a JPEG at a reduced DCT scale where ``box`` allows
    (PIL's draft mode); PIL's errors for a file that is no (whole) image."""
    with Image.open(io.BytesIO(data)) as image:
        reduction = dct_reduction(box, size) if image.format == "JPEG" else 1
        if reduction > 1:
            width, height = image.size
            image.draft("RGB", (-(-width // reduction), -(-height // reduction)))
        # Resampling a palette image would mix palette indices; CMYK, alpha and 16-bit
        # images are made RGB as torchvision's loader makes them.
        rgb = image if image.mode == "RGB" else image.convert("RGB")
        return np.array(rgb)


def decode_region(
    data: bytes, preset: Preset, rng: random.Random | None
) -> tuple[np.ndarray, Box, bool]:
    """The decoded image (height x width x RGB, uint8, possibly at a reduced scale), the
    preset's region in its pixels, and whether to flip it."""
    size = jpeg_size(data)
    if size is None:
        with Image.open(io.BytesIO(data)) as image:
            size = image.size
        check_pixels(*size)
        box, flip = preset.region(*size, rng)
        pixels = _pil_pixels(data, box, preset.size)
    else:
        box, flip = preset.region(*size, rng)
        try:
            pixels = _turbo_pixels(data, *size, dct_reduction(box, preset.size))
        except ValueError:
            pixels = _pil_pixels(data, box, preset.size)
    scale_x, scale_y = pixels.shape[1] / size[0], pixels.shape[0] / size[1]
    scaled = (box[0] * scale_x, box[1] * scale_y, box[2] * scale_x, box[3] * scale_y)
    return pixels, scaled, flip


def pixel_box(box: Box, width: int, height: int) -> tuple[int, int, int, int]:
    """``box`` on whole pixels, at least one pixel, inside a ``width`` x ``height`` image."""
    left = min(max(0, math.floor(box[0] + 0.5)), width - 1)
    top = min(max(0, math.floor(box[1] + 0.5)), height - 1)
    right = min(width, max(left + 1, math.floor(box[2] + 0.5)))
    bottom = min(height, max(top + 1, math.floor(box[3] + 0.5)))
    return left, top, right, bottom


def resize_into(pixels: np.ndarray, box: Box, flip: bool, out: np.ndarray) -> None:
    """``box`` of ``pixels`` resized (antialiased bilinear, torchvision's) to fill ``out``
    (size x size x 3, uint8), mirrored left to right when ``flip``.

    Both sides are channels_last to torch (height x width x RGB in memory): its vectorised
    uint8 kernel takes and gives that layout, and the result is then copied into ``out``
    as it lies (a strided view in or out took 2-10x as long, measured)."""
    left, top, right, bottom = pixel_box(box, pixels.shape[1], pixels.shape[0])
    region = torch.from_numpy(pixels[top:bottom, left:right]).permute(2, 0, 1).unsqueeze(0)
    resized = torch.nn.functional.interpolate(
        region.contiguous(memory_format=torch.channels_last),
        size=out.shape[:2],
        mode="bilinear",
        antialias=True,
        align_corners=False,
    )
    target = torch.from_numpy(out).permute(2, 0, 1).unsqueeze(0)
    target.copy_(resized.flip(3) if flip else resized)


def render(data: bytes, preset: Preset, rng: random.Random | None, out: np.ndarray) -> None:
    """Decode ``data`` and write the preset's sample into ``out`` (size x size x 3, uint8)."""
    pixels, box, flip = decode_region(data, preset, rng)
    resize_into(pixels, box, flip, out)
