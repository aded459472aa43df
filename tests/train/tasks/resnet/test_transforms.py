from __future__ import annotations

import io
import random

import numpy as np
import pytest
from PIL import Image

from ddpimg.train.tasks.resnet.transforms import (
    RATIO,
    SCALE,
    EvalPreset,
    TrainPreset,
    centre_box,
    crop_box,
    resized_region,
)
from tests.datagen import image


def encoded(width: int, height: int, kind: str = "JPEG", mode: str = "RGB") -> bytes:
    picture = Image.fromarray(image(np.random.default_rng(0), 3, 10, width, height))
    if mode != "RGB":
        picture = picture.convert(mode)
    stream = io.BytesIO()
    picture.save(stream, kind, quality=95)
    return stream.getvalue()


def test_crop_boxes_stay_within_torchvisions_bounds() -> None:
    rng = random.Random(0)
    for _ in range(500):
        left, top, right, bottom = crop_box(500, 375, rng)
        width, height = right - left, bottom - top
        assert 0 <= left < right <= 500
        assert 0 <= top < bottom <= 375
        assert SCALE[0] - 0.01 <= width * height / (500 * 375) <= SCALE[1]
        assert RATIO[0] - 0.02 <= width / height <= RATIO[1] + 0.02


def test_a_crop_is_a_function_of_the_generator_seed() -> None:
    boxes = [crop_box(640, 480, random.Random(seed)) for seed in (1, 1, 2)]
    assert boxes[0] == boxes[1] != boxes[2]


def test_an_extreme_aspect_falls_back_to_a_centre_crop() -> None:
    # No crop of 1000 x 10 has an aspect within 3/4 .. 4/3 and 8% of the area.
    left, top, right, bottom = crop_box(1000, 10, random.Random(0))
    assert (top, bottom) == (0, 10)
    assert right - left == round(10 * RATIO[1])
    assert left == (1000 - (right - left)) // 2


@pytest.mark.parametrize(
    ("kind", "mode"),
    [("JPEG", "RGB"), ("JPEG", "L"), ("JPEG", "CMYK"), ("PNG", "P"), ("PNG", "RGBA")],
)
def test_every_mode_comes_out_rgb_at_the_size(kind: str, mode: str) -> None:
    with Image.open(io.BytesIO(encoded(90, 60, kind, mode))) as picture:
        pixels = TrainPreset(32)(picture, random.Random(0))
    assert pixels.shape == (32, 32, 3)
    assert pixels.dtype == np.uint8


def test_draft_decoding_matches_a_full_decode() -> None:
    data = encoded(1024, 768)
    box = (100.0, 50.0, 900.0, 650.0)  # 800 x 600 down to 64: decoded at 1/8
    with Image.open(io.BytesIO(data)) as picture:
        drafted = np.asarray(resized_region(picture, box, 64), dtype=float)
    with Image.open(io.BytesIO(data)) as picture:
        picture.load()
        full = np.asarray(picture.resize((64, 64), Image.Resampling.BILINEAR, box=box), dtype=float)
    assert np.abs(drafted - full).mean() < 4.0


def smooth(width: int, height: int) -> bytes:
    """A PNG of smooth gradients: a sub-pixel shift changes it little, noise would."""
    ys, xs = np.mgrid[0:height, 0:width]
    pixels = np.stack([xs * 255 / width, ys * 255 / height, (xs + ys) * 127 / (width + height)], -1)
    stream = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(stream, "PNG")
    return stream.getvalue()


def test_evaluation_is_torchvisions_resize_and_centre_crop() -> None:
    from torchvision.transforms import v2

    data = smooth(300, 200)
    with Image.open(io.BytesIO(data)) as picture:
        ours = EvalPreset(64)(picture, None).astype(float)
    reference = v2.Compose([v2.Resize(round(64 * 256 / 224)), v2.CenterCrop(64), v2.PILToTensor()])
    with Image.open(io.BytesIO(data)) as picture:
        theirs = reference(picture.convert("RGB")).permute(1, 2, 0).numpy().astype(float)
    assert np.abs(ours - theirs).mean() < 1.5
    # The shorter side 200 becomes 73; 64 of it are 200 x 224/256 = 175 source pixels.
    assert centre_box(300, 200, 64) == pytest.approx((62.5, 12.5, 237.5, 187.5))


def test_the_flip_is_drawn_after_the_crop() -> None:
    data = encoded(80, 80)
    flips = set()
    for seed in range(20):
        rng = random.Random(seed)
        with Image.open(io.BytesIO(data)) as picture:
            pixels = TrainPreset(40)(picture, rng)
        replay = random.Random(seed)
        box = crop_box(80, 80, replay)
        flipped = replay.random() < 0.5
        flips.add(flipped)
        with Image.open(io.BytesIO(data)) as picture:
            plain = np.asarray(resized_region(picture, box, 40))
        assert np.array_equal(pixels, plain[:, ::-1] if flipped else plain)
    assert flips == {True, False}
