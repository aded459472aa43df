"""Which image flavour a site's GPUs need, for ``ddpimg sbatch``: the image it uses by default,
and a warning when the ``--image`` given looks like another flavour that cannot drive them.

The site says its flavour in ``[hardware] build`` (a name in
:data:`ddpimg.hardware.builds.BUILDS`). Default images, by runtime:

- docker: the flavour's image tag (``ddpimg:gpu-cu128``), or ``ddpimg:cpu`` without GPUs;
- apptainer: ``ddp.sif`` for the flavour tagged ``ddpimg:gpu`` (the image README.md builds
  first), ``ddp-<tag>.sif`` for the others (``ddp-gpu-cu128.sif``).

Which flavour a given image is cannot be known without opening it, so the warning rests on
a heuristic, documented as such: the image's file or tag name contains a flavour's tag
(:func:`ddpimg.site.fabric.image_flavour`, the longest tag wins). No tag in the name, no
warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ddpimg.hardware.compat import GpuInfo, build_fits, parse_arch_flags
from ddpimg.site.fabric import flavour_tags, image_flavour
from ddpimg.site.model import Hardware

if TYPE_CHECKING:
    from ddpimg.hardware.builds import TorchBuild

DEFAULT_GPU_TAG = "ddpimg:gpu"


def _builds() -> Mapping[str, TorchBuild]:
    from ddpimg.hardware.builds import BUILDS

    return BUILDS


def default_image(
    runtime: str, hardware: Hardware, gpus: bool, builds: Mapping[str, TorchBuild] | None = None
) -> str | None:
    """The image a job uses when none is given; None: the runtime's plain default."""
    builds = _builds() if builds is None else builds
    build = builds.get(hardware.build)
    if build is None or not gpus:
        return None
    if runtime == "docker":
        return build.image_tag
    if runtime == "apptainer":
        tag = build.image_tag.rpartition(":")[2]
        return "ddp.sif" if build.image_tag == DEFAULT_GPU_TAG else f"ddp-{tag}.sif"
    return None


def _site_gpu(hardware: Hardware, builds: Mapping[str, TorchBuild]) -> GpuInfo | None:
    site_build = builds.get(hardware.build)
    if site_build is None:
        return None
    sass, _ = parse_arch_flags([hardware.arch])
    return GpuInfo(
        vendor=site_build.vendor,
        name=hardware.gpus or "the site's GPUs",
        capability=sass[0] if sass else None,
    )


def flavour_mismatch(
    image: str, hardware: Hardware, builds: Mapping[str, TorchBuild] | None = None
) -> tuple[str, str] | None:
    """(message, hint) when ``image`` looks like a flavour that cannot drive the site's GPUs."""
    builds = _builds() if builds is None else builds
    gpu = _site_gpu(hardware, builds)
    if gpu is None:
        return None
    looks_like = image_flavour(
        image, flavour_tags((name, b.image_tag) for name, b in builds.items())
    )
    if looks_like is None or looks_like == hardware.build:
        return None
    other = builds[looks_like]
    if build_fits(other, gpu):
        return None
    arch = f" ({hardware.arch})" if hardware.arch else ""
    wanted = builds[hardware.build]
    return (
        f"--image {image} looks like the {looks_like} flavour ({other.image_tag}, by its name), "
        f"which cannot drive this site's {gpu.name}{arch}",
        f"use the {hardware.build} flavour ({wanted.image_tag}); the name test is a heuristic: "
        "ignore this if the image is in fact that flavour",
    )
