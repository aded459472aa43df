"""A dataset of real photographs for the loader benchmark, made from the sample photographs
that scikit-image ships inside its wheel (``skimage/data``: an astronaut, a cat, coffee,
motorcycles, a rocket, a retina, a stained tissue, a deep field of galaxies), so nothing is
downloaded. Generated noise compresses and decodes unlike a photograph (its JPEG coefficients
are dense noise at every frequency); these decode at the rate real ImageNet-like files do.

Each file is a random window of one photograph (40-100% of each side), scaled so that its
sides fall in 300-600 px (ImageNet's mean is about 400 x 350), flipped at random, saved as
an RGB JPEG of quality 90; the class is the photograph it came from. Generated from a seed:
the same call writes the same files. The package's data folder is found without importing
the package (which would import SciPy).
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

PACKAGE = "skimage"
# The colour photographs of skimage/data; the others are greyscale, synthetic or drawings.
PHOTOS = (
    "astronaut.png",
    "chelsea.png",
    "coffee.png",
    "hubble_deep_field.jpg",
    "ihc.png",
    "motorcycle_left.png",
    "motorcycle_right.png",
    "retina.jpg",
    "rocket.jpg",
)
SIDES = (300, 600)
WINDOW = (0.4, 1.0)
QUALITY = 90


class PhotosMissing(RuntimeError):
    """scikit-image is not installed: ``requirements/bench.txt`` names it."""


def photo_folder() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise PhotosMissing(
            f"the real-photo dataset needs the sample photographs of {PACKAGE!r}: "
            "pip install -r requirements/bench.txt (nox -s bench does)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def make_photo_tree(root: Path, *, train_per_class: int, val_per_class: int, seed: int = 0) -> None:
    """Write ``root/train/CLASS/*.jpg`` and ``root/val/CLASS/*.jpg``, one class per
    photograph of ``PHOTOS``."""
    from PIL import Image

    folder = photo_folder()
    rng = random.Random(seed)
    for label, name in enumerate(PHOTOS):
        with Image.open(folder / name) as opened:
            photo = opened.convert("RGB")
        width, height = photo.size
        for split, count in (("train", train_per_class), ("val", val_per_class)):
            target = root / split / f"{label:02d}-{name.split('.')[0]}"
            target.mkdir(parents=True, exist_ok=True)
            for index in range(count):
                w = round(width * rng.uniform(*WINDOW))
                h = round(height * rng.uniform(*WINDOW))
                left, top = rng.randint(0, width - w), rng.randint(0, height - h)
                # The longer side drawn from SIDES, the shorter raised to SIDES[0] if it fell
                # below (stretching a narrow window a little), neither above SIDES[1].
                factor = rng.randint(*SIDES) / max(w, h)
                factor = max(factor, SIDES[0] / min(w, h))
                size = (min(SIDES[1], round(w * factor)), min(SIDES[1], round(h * factor)))
                picture = photo.resize(
                    size, Image.Resampling.LANCZOS, box=(left, top, left + w, top + h)
                )
                if rng.random() < 0.5:
                    picture = picture.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
                picture.save(target / f"{index:05d}.jpg", "JPEG", quality=QUALITY)
