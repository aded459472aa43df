"""The torch builds ddpimg's images ship, by flavour: which GPUs each one's kernels run on
and which driver it needs.

A flavour is one lock file (``containers/lock/LOCK.txt``) and the GPU image built from it
(``nox -s image -- gpu --torch LOCK``), for one CPU architecture:

================  ==============  ===========  ===================  ======================  ======
flavour           lock            machine      torch (CUDA)         kernels for (sm)        driver
================  ==============  ===========  ===================  ======================  ======
``cuda13``        ``pypi``        x86_64       2.14.1 (CUDA 13.0)   7.5 8.0 8.6 9.0 10.0    >= 580
                                                                    12.0
``cuda12``        ``pypi-cu128``  x86_64       2.10.0 (CUDA 12.8)   7.0 7.5 8.0 8.6 9.0     >= 570
                                                                    10.0 12.0
``cuda13-arm64``  ``pypi-arm64``  aarch64      2.14.1 (CUDA 13.0)   8.0 9.0 10.0 11.0 12.0  >= 580
``rocm``          none yet        x86_64       (AMD GPUs)
================  ==============  ===========  ===================  ======================  ======

The architectures are what ``torch._C._cuda_getArchFlags()`` prints in each image (no GPU
needed to ask); no build lists a ``compute_*`` entry, i.e. torch's kernels carry no PTX
that a newer GPU's driver could compile. Compiled code (SASS) for X.y runs on GPUs X.z with
z >= y (sm_86 code on an sm_89 L40), never on another major or a lower minor. Hence the V100
(sm 7.0: Palmetto, Puhti, HDF-ML) needs ``cuda12``: every CUDA kernel of ``cuda13``, whose
oldest is sm 7.5, fails on it.

``cuda13-arm64`` is PyPI's aarch64 build of the same torch release (the
``manylinux_2_28_aarch64`` wheel), for GH200 nodes (Grace CPU, H100 GPU: sm 9.0; JUPITER,
Alps, Isambard-AI, Roihu) and the other NVIDIA systems with Arm CPUs: GB200 (sm 10.0), Thor
(sm 11.0), DGX Spark (sm 12.1, served by sm 12.0). Its list differs from x86-64's: no sm 7.5 or
8.6 (an sm 8.6 GPU runs the sm 8.0 code), and sm 11.0 added. An image runs only on its own
``machine`` (``platform.machine()``), which is what tells two flavours of one torch release
apart. ``tests/containers/test_flavours.py`` checks this table against the built images,
``tests/hardware/test_builds.py`` against the lock files.

``min_driver`` is the driver branch of the build's CUDA toolkit release (CUDA 13.0: R580,
CUDA 12.8: R570), also what the image's CUDA base demands before the NVIDIA container
runtime starts it (``NVIDIA_REQUIRE_CUDA``). CUDA's minor version compatibility lets a CUDA
12.x program run on a driver >= 525 without PTX JIT, which these kernels do not need; that
is not what ddpimg promises.

The ``rocm`` flavour has no lock and no image yet: PyTorch's ROCm wheels come from PyTorch's
own index, which this project's build machines cannot reach. It is listed so that AMD sites
(LUMI) can name the flavour they need.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Arch = tuple[int, int]  # a compute capability, (major, minor): sm_86 is (8, 6)


@dataclass(frozen=True)
class TorchBuild:
    """One torch build an image flavour ships."""

    name: str  # the flavour: "cuda13", "cuda12", "cuda13-arm64", "rocm"
    lock: str | None  # containers/lock/LOCK.txt; None: no lock yet
    torch_version: str | None  # the public version ("2.10.0"); None: not pinned (no lock)
    cuda_version: str | None  # torch.version.cuda, "major.minor"; None: not a CUDA build
    vendor: Literal["nvidia", "amd"]
    archs: tuple[Arch, ...]  # compute capabilities with native kernels (SASS), ascending
    ptx_arch: Arch | None  # the PTX that newer GPUs' drivers could JIT-compile; None: none
    min_driver: int | None  # the oldest driver branch (major) it supports; None: not NVIDIA
    # What `nox -s image -- gpu --torch LOCK` tags. The rocm flavour's tag names the image
    # LUMI needs (docs/sites.md, LUMI) although no lock can build it here yet.
    image_tag: str
    machine: Literal["x86_64", "aarch64"] = "x86_64"  # platform.machine() of the image's CPU


BUILDS: Mapping[str, TorchBuild] = MappingProxyType(
    {
        "cuda13": TorchBuild(
            name="cuda13",
            lock="pypi",
            torch_version="2.14.1",
            cuda_version="13.0",
            vendor="nvidia",
            archs=((7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (12, 0)),
            ptx_arch=None,
            min_driver=580,
            image_tag="ddpimg:gpu",
            machine="x86_64",
        ),
        "cuda12": TorchBuild(
            name="cuda12",
            lock="pypi-cu128",
            torch_version="2.10.0",
            cuda_version="12.8",
            vendor="nvidia",
            archs=((7, 0), (7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (12, 0)),
            ptx_arch=None,
            min_driver=570,
            image_tag="ddpimg:gpu-cu128",
            machine="x86_64",
        ),
        "cuda13-arm64": TorchBuild(
            name="cuda13-arm64",
            lock="pypi-arm64",
            torch_version="2.14.1",
            cuda_version="13.0",
            vendor="nvidia",
            archs=((8, 0), (9, 0), (10, 0), (11, 0), (12, 0)),
            ptx_arch=None,
            min_driver=580,
            image_tag="ddpimg:gpu-arm64",
            machine="aarch64",
        ),
        "rocm": TorchBuild(
            name="rocm",
            lock=None,
            torch_version=None,
            cuda_version=None,
            vendor="amd",
            archs=(),
            ptx_arch=None,
            min_driver=None,
            image_tag="ddpimg:gpu-rocm",
            machine="x86_64",
        ),
    }
)


def _public(version: str) -> str:
    """The public version: PyPI's CUDA wheels report "2.10.0+cu128" at run time."""
    return version.split("+", 1)[0].strip()


def _major_minor(version: str) -> str:
    return ".".join(version.strip().split(".")[:2])


def build_for_torch(
    torch_version: str, cuda_version: str | None, hip_version: str | None, machine: str
) -> TorchBuild | None:
    """The flavour whose build this torch is, from ``torch.__version__``,
    ``torch.version.cuda``, ``torch.version.hip`` and ``platform.machine()``; None for a
    build no image ships (a CPU-only torch, another version, another CUDA, another CPU).

    Any ROCm build is the ``rocm`` flavour, which pins no version yet.
    """
    if cuda_version and hip_version:
        raise ValueError(
            f"torch {torch_version} reports both CUDA {cuda_version} and HIP {hip_version}; "
            "a torch build has one or the other"
        )
    version = _public(torch_version)
    for build in BUILDS.values():
        if build.machine != machine:
            continue
        if hip_version:
            matches = build.vendor == "amd" and build.torch_version in (None, version)
        elif cuda_version:
            matches = (
                build.vendor == "nvidia"
                and build.torch_version == version
                and build.cuda_version == _major_minor(cuda_version)
            )
        else:
            matches = False
        if matches:
            return build
    return None
