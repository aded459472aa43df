"""Which image flavour a site's GPUs need, for ``ddpimg sbatch``: the image it uses by default,
and a warning when the ``--image`` given looks like another flavour that cannot drive them.

The site says its flavour in ``[hardware] build`` (a name in
:data:`ddpimg.hardware.builds.BUILDS`). The default image is that flavour's, named in the
runtime's form by :func:`ddpimg.imagenames.image_names` (``ddp-cu128.sif`` for apptainer,
``ddpimg:gpu-cu128`` for docker and podman-hpc, ``./ddpimg+gpu-cu128.sqsh`` for pyxis); a job
without GPUs, or on a site that names no flavour, gets the CPU image or the default GPU image.

An image of another CPU (x86_64 on a GH200's aarch64) is warned about too. Which flavour a
given image is cannot be known without opening it, so the warning rests on
a heuristic, documented as such: the image's file name is one of a flavour's names, or its
name contains a flavour's tag (:func:`ddpimg.site.fabric.image_flavour`, the longest match
wins). Neither, no warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ddpimg.hardware.compat import GpuInfo, build_fits, parse_arch_flags
from ddpimg.imagenames import ImageNames, image_names, names_of_tag
from ddpimg.site.container import image_reference
from ddpimg.site.fabric import image_flavour
from ddpimg.site.model import Hardware

if TYPE_CHECKING:
    from ddpimg.hardware.builds import TorchBuild


def _builds() -> Mapping[str, TorchBuild]:
    from ddpimg.hardware.builds import BUILDS

    return BUILDS


def default_image(
    runtime: str, hardware: Hardware, gpus: bool, builds: Mapping[str, TorchBuild] | None = None
) -> str:
    """The image a job uses when none is given ("" for ``--runtime none``)."""
    builds = _builds() if builds is None else builds
    build = builds.get(hardware.build)
    if not gpus:
        names = image_names("cpu")
    elif build is None:
        names = image_names("gpu")
    else:
        names = names_of_tag(build.image_tag)
    return image_reference(runtime, names)


def unbuildable(hardware: Hardware, builds: Mapping[str, TorchBuild] | None = None) -> str:
    """The site's flavour when this project cannot build its image (no lock), else ""."""
    builds = _builds() if builds is None else builds
    build = builds.get(hardware.build)
    return build.name if build is not None and build.lock is None else ""


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


def flavour_names(builds: Mapping[str, TorchBuild]) -> dict[str, ImageNames]:
    """Each flavour's image names."""
    return {name: names_of_tag(build.image_tag) for name, build in builds.items()}


def flavour_mismatch(
    image: str, hardware: Hardware, builds: Mapping[str, TorchBuild] | None = None
) -> tuple[str, str] | None:
    """(message, hint) when ``image`` looks like a flavour that cannot drive the site's GPUs."""
    builds = _builds() if builds is None else builds
    gpu = _site_gpu(hardware, builds)
    if gpu is None:
        return None
    looks_like = image_flavour(image, flavour_names(builds))
    if looks_like is None or looks_like == hardware.build:
        return None
    other = builds[looks_like]
    wanted = builds[hardware.build]
    if build_fits(other, gpu) and other.machine == wanted.machine:
        return None
    arch = f" ({hardware.arch})" if hardware.arch else ""
    cannot = (
        f"is built for {other.machine} CPUs, not this site's {wanted.machine}"
        if other.machine != wanted.machine
        else f"cannot drive this site's {gpu.name}{arch}"
    )
    return (
        f"--image {image} looks like the {looks_like} flavour ({other.image_tag}, by its name), "
        f"which {cannot}",
        f"use the {hardware.build} flavour ({wanted.image_tag}); the name test is a heuristic: "
        "ignore this if the image is in fact that flavour",
    )
