"""PLACEHOLDER, to be replaced by the hw-image branch's module of the same name (theirs wins
at merge). It holds exactly the interface that branch publishes, with the values its brief
gives, so that profile validation and the compatibility rules can be written and tested
against it now. Pure: no torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class TorchBuild:
    """One torch build an image flavour ships."""

    name: str
    lock: str
    torch_version: str
    cuda_version: str | None
    vendor: Literal["nvidia", "amd"]
    archs: tuple[tuple[int, int], ...]
    ptx_arch: tuple[int, int] | None
    min_driver: int | None
    image_tag: str


_CUDA13_ARCHS = ((7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (12, 0))
_CUDA12_ARCHS = ((7, 0), (7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (12, 0))

BUILDS: Mapping[str, TorchBuild] = {
    "cuda13": TorchBuild(
        "cuda13", "pypi", "2.14.1", "13.0", "nvidia", _CUDA13_ARCHS, (12, 0), 580, "ddpimg:gpu"
    ),
    "cuda12": TorchBuild(
        "cuda12",
        "pypi-cu128",
        "2.10.0",
        "12.8",
        "nvidia",
        _CUDA12_ARCHS,
        (12, 0),
        570,
        "ddpimg:gpu-cu128",
    ),
    "rocm": TorchBuild("rocm", "", "", None, "amd", (), None, None, "ddpimg:gpu-rocm"),
}


def build_for_torch(
    torch_version: str, cuda_version: str | None, hip_version: str | None
) -> TorchBuild | None:
    """The build with this torch version and CUDA version (or the ROCm build when HIP is
    set); None when none matches."""
    base = torch_version.split("+", 1)[0]
    for build in BUILDS.values():
        if hip_version:
            if build.vendor == "amd":
                return build
            continue
        if build.torch_version == base and build.cuda_version == cuda_version:
            return build
    return None
