from __future__ import annotations

import io
import random
import zlib

import numpy as np
import pytest
from PIL import Image, ImageFile

from ddpimg.train.tasks.resnet.transforms import (
    RATIO,
    SCALE,
    EvalPreset,
    TrainPreset,
    centre_box,
    crop_box,
    dct_reduction,
    decode_region,
    jpeg_size,
    pixel_box,
    render,
    resize_into,
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


def rendered(data: bytes, preset: TrainPreset | EvalPreset, seed: int | None = 0) -> np.ndarray:
    out = np.empty((preset.size, preset.size, 3), dtype=np.uint8)
    render(data, preset, None if seed is None else random.Random(seed), out)
    return out


@pytest.mark.parametrize(
    ("kind", "mode"),
    [("JPEG", "RGB"), ("JPEG", "L"), ("JPEG", "CMYK"), ("PNG", "P"), ("PNG", "RGBA")],
)
def test_every_mode_comes_out_rgb_at_the_size(kind: str, mode: str) -> None:
    data = encoded(90, 60, kind, mode)
    pixels = rendered(data, TrainPreset(32))
    assert pixels.shape == (32, 32, 3)
    # The same region decoded by PIL as torchvision's loader decodes it (no DCT reduction
    # at this size): libjpeg-turbo's CMYK conversion differs from PIL's by rounding only.
    with Image.open(io.BytesIO(data)) as picture:
        reference = np.array(picture.convert("RGB"))
    box, flip = TrainPreset(32).region(90, 60, random.Random(0))
    expected = np.empty_like(pixels)
    resize_into(reference, box, flip, expected)
    assert np.abs(pixels.astype(int) - expected).max() <= 1


@pytest.mark.parametrize(
    ("box", "size", "reduction"),
    [
        ((0, 0, 800, 600), 64, 8),
        ((0, 0, 511, 600), 64, 4),
        ((0, 0, 300, 300), 224, 1),
        ((0, 0, 448, 500), 224, 2),
        ((10, 10, 457, 500), 224, 1),
    ],
)
def test_the_dct_reduction_keeps_the_region_at_least_the_output_size(
    box: tuple[float, float, float, float], size: int, reduction: int
) -> None:
    assert dct_reduction(box, size) == reduction


def test_a_reduced_dct_scale_matches_a_full_decode() -> None:
    data = encoded(1024, 768)
    box = (100.0, 50.0, 900.0, 650.0)  # 800 x 600 down to 64: decoded at 1/8

    class Fixed:
        size = 64

        def region(self, width: int, height: int, rng: random.Random | None) -> tuple:
            return box, False

    pixels, scaled, _ = decode_region(data, Fixed(), None)
    assert pixels.shape == (96, 128, 3)
    assert scaled == pytest.approx((12.5, 6.25, 112.5, 81.25))
    drafted = np.empty((64, 64, 3), dtype=np.uint8)
    resize_into(pixels, scaled, False, drafted)
    with Image.open(io.BytesIO(data)) as picture:
        picture.load()
        full = np.asarray(picture.resize((64, 64), Image.Resampling.BILINEAR, box=box), dtype=float)
    assert np.abs(drafted - full).mean() < 4.0


def test_a_jpeg_the_strict_decoder_refuses_is_decoded_as_pil_decodes_it() -> None:
    data = encoded(120, 80)
    # Two stray bytes inside the entropy-coded data: libjpeg warns (PIL decodes on),
    # libjpeg-turbo's strict mode refuses.
    damaged = data[:-100] + b"\x00\x00" + data[-100:]
    preset = EvalPreset(40)
    pixels = rendered(damaged, preset, seed=None)
    with Image.open(io.BytesIO(damaged)) as picture:
        reference = np.array(picture.convert("RGB"))
    expected = np.empty_like(pixels)
    resize_into(reference, centre_box(120, 80, 40), False, expected)
    assert np.array_equal(pixels, expected)


def test_a_truncated_jpeg_is_an_error() -> None:
    data = encoded(120, 80)
    with pytest.raises(OSError, match="truncated"):
        rendered(data[: len(data) // 2], EvalPreset(40), seed=None)


def test_a_header_claiming_a_huge_image_is_refused_before_decoding() -> None:
    data = bytearray(encoded(64, 48))
    frame = data.index(b"\xff\xc0")  # SOF0: length (2), precision (1), height, width
    data[frame + 5 : frame + 9] = (60000).to_bytes(2, "big") * 2
    with pytest.raises(Image.DecompressionBombError):
        jpeg_size(bytes(data))


def with_size(png: bytes, width: int, height: int) -> bytes:
    """``png`` with its IHDR chunk claiming ``width`` x ``height`` (CRC recomputed)."""
    start = png.index(b"IHDR")
    fields = bytearray(png[start : start + 17])
    fields[4:12] = width.to_bytes(4, "big") + height.to_bytes(4, "big")
    crc = zlib.crc32(bytes(fields)).to_bytes(4, "big")
    return png[:start] + bytes(fields) + crc + png[start + 21 :]


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # PIL's, at open
@pytest.mark.parametrize(("width", "height"), [(13000, 13000), (9460, 9460)])
def test_a_png_claiming_many_pixels_is_refused_before_decoding(
    width: int, height: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 490 KB PNG claiming 13000 x 13000 pixels (below twice PIL's limit, so PIL only
    warned) took 2.5 GB to decode. Now refused from its header: the decoder is never
    called (it would fail this test)."""
    data = with_size(encoded(32, 24, "PNG"), width, height)

    def decoded(*args: object) -> None:
        raise AssertionError("the image was decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", decoded)
    with pytest.raises(Image.DecompressionBombError, match=rf"claims {width} x {height} pixels"):
        decode_region(data, EvalPreset(40), None)


@pytest.mark.parametrize(
    ("box", "expected"),
    [
        ((62.5, 12.5, 237.5, 187.5), (63, 13, 238, 188)),
        ((-0.2, 0.0, 10.0, 10.0), (0, 0, 10, 10)),
        ((5.0, 5.0, 5.2, 5.1), (5, 5, 6, 6)),
        ((290.0, 190.0, 301.0, 201.0), (290, 190, 300, 200)),
    ],
)
def test_a_box_is_rounded_to_whole_pixels_inside_the_image(
    box: tuple[float, float, float, float], expected: tuple[int, int, int, int]
) -> None:
    assert pixel_box(box, 300, 200) == expected


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
    ours = rendered(data, EvalPreset(64), seed=None).astype(float)
    reference = v2.Compose([v2.Resize(round(64 * 256 / 224)), v2.CenterCrop(64), v2.PILToTensor()])
    with Image.open(io.BytesIO(data)) as picture:
        theirs = reference(picture.convert("RGB")).permute(1, 2, 0).numpy().astype(float)
    # Measured: 0.19 levels on average, 1 at most (the region is cropped on whole source
    # pixels, torchvision's after resizing); a region off by one pixel gives 1.0 on average.
    assert np.abs(ours - theirs).mean() < 0.5
    # 300 x 200 becomes 109 x 73, of which columns 22-85 and rows 4-67 are kept.
    x, y = 300 / 109, 200 / 73
    assert centre_box(300, 200, 64) == pytest.approx((22 * x, 4 * y, 86 * x, 68 * y))
    assert centre_box(200, 300, 64) == pytest.approx((4 * y, 22 * x, 68 * y, 86 * x))


def test_training_is_torchvisions_random_resized_crop_of_the_same_box() -> None:
    from torchvision.transforms.v2 import functional

    data = smooth(300, 200)
    for seed in range(5):
        box, flip = TrainPreset(64).region(300, 200, random.Random(seed))
        left, top, right, bottom = (int(v) for v in box)
        with Image.open(io.BytesIO(data)) as picture:
            tensor = functional.pil_to_tensor(picture.convert("RGB"))
        theirs = functional.resized_crop(
            tensor, top, left, bottom - top, right - left, [64, 64], antialias=True
        )
        if flip:
            theirs = functional.horizontal_flip(theirs)
        ours = rendered(data, TrainPreset(64), seed)
        assert np.array_equal(ours, theirs.permute(1, 2, 0).numpy())


def test_the_flip_is_drawn_after_the_crop() -> None:
    data = encoded(80, 80)
    flips = set()
    for seed in range(20):
        pixels = rendered(data, TrainPreset(40), seed)
        replay = random.Random(seed)
        box = crop_box(80, 80, replay)
        flipped = replay.random() < 0.5
        flips.add(flipped)
        with Image.open(io.BytesIO(data)) as picture:
            decoded = np.array(picture)
        plain = np.empty_like(pixels)
        resize_into(decoded, box, False, plain)
        assert np.array_equal(pixels, plain[:, ::-1] if flipped else plain)
    assert flips == {True, False}
