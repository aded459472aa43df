"""Every name of every ddpimg image, from one function: :func:`image_names`.

An image is identified by its kind (``gpu``, ``cpu``, or ``standalone`` for the SIF that
Apptainer builds alone) and its variant (the lock's: ``""`` for the default CUDA 13 build,
``cu128``, ``arm64``, ``rocm``). Each container runtime refers to it by a name of its own:

==============  =====================  ======================  =========================
variant         Docker / podman tag    Apptainer SIF           enroot squashfs
==============  =====================  ======================  =========================
gpu             ``ddpimg:gpu``         ``ddp.sif``             ``ddpimg+gpu.sqsh``
gpu, cu128      ``ddpimg:gpu-cu128``   ``ddp-cu128.sif``       ``ddpimg+gpu-cu128.sqsh``
cpu             ``ddpimg:cpu``         ``ddp-cpu.sif``         ``ddpimg+cpu.sqsh``
==============  =====================  ======================  =========================

The squashfs name is the one ``enroot import dockerd://TAG`` writes. The image builder
(``containers/imagebuild``: ``nox -s image``, ``nox -s sif``), ``ddpimg sbatch`` and the
documentation's examples all take their names from here (``tests/test_imagenames.py`` checks
the documents). A leaf module: ``containers/imagebuild`` imports it under nox's own Python,
where ddpimg is not installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REPOSITORY = "ddpimg"
# The kind whose SIF carries no kind in its name: the image docs/containers.md builds first.
DEFAULT_KIND = "gpu"
_TAG = re.compile(rf"{REPOSITORY}:(?P<kind>[a-z0-9]+)(?:-(?P<variant>[a-z0-9][a-z0-9-]*))?\Z")


@dataclass(frozen=True)
class ImageNames:
    """One image's names: ``tag`` for Docker and podman, ``sif`` for Apptainer and
    SingularityCE, ``sqsh`` for enroot (pyxis, the CSCS Container Engine)."""

    tag: str
    sif: str
    sqsh: str


def image_names(kind: str, variant: str = "") -> ImageNames:
    """The names of the ``kind`` image (``gpu``, ``cpu``, ``standalone``) of ``variant``
    (``""``, ``cu128``, ...)."""
    suffix = f"-{variant}" if variant else ""
    tag = f"{REPOSITORY}:{kind}{suffix}"
    sif_kind = "" if kind == DEFAULT_KIND else f"-{kind}"
    return ImageNames(
        tag=tag, sif=f"ddp{sif_kind}{suffix}.sif", sqsh=f"{tag.replace(':', '+')}.sqsh"
    )


def names_of_tag(tag: str) -> ImageNames:
    """The names of the image tagged ``tag`` (``ddpimg:KIND[-VARIANT]``)."""
    match = _TAG.match(tag)
    if match is None:
        raise ValueError(f"{tag!r} is not a ddpimg image tag ({REPOSITORY}:KIND[-VARIANT])")
    return image_names(match["kind"], match["variant"] or "")
