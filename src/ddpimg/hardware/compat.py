"""Can the torch build inside this image drive this machine's GPU? Checked before
``init_process_group``, so that a wrong image stops with one clear message instead of a
``no kernel image is available for execution on the device`` deep inside the first step.

Three questions, each a pure rule (:func:`check_compatibility`) over what a small probe
(:class:`GpuProbe`) reports; the real probe (:class:`TorchProbe`) imports torch and reads
``/proc`` and ``/sys``, tests use fakes:

1. Vendor: an AMD GPU needs a ROCm build of torch, an NVIDIA GPU a CUDA build. A CUDA build
   on an AMD node (LUMI) sees no GPU at all (``torch.cuda.is_available()`` is False) and
   would train on the CPU without a word; the probe therefore looks for GPUs in sysfs too.
2. Architecture: a kernel compiled to SASS for ``sm_XY`` runs on GPUs of the same major
   version ``X`` with minor ``>= Y``; PTX for ``compute_XY`` is compiled by the driver for
   any GPU of capability ``>= (X, Y)``. An older GPU cannot run newer code: the V100
   (sm_70) is not in the CUDA 13 wheels' list ``sm_75 .. sm_120``.
3. Driver: the CUDA version the driver supports (``cudaDriverGetVersion``) must have the
   wheel's CUDA major version. Within one major version, CUDA's minor-version compatibility
   lets an older driver run the wheel's SASS, but not JIT-compile its PTX (that needs a
   driver at least as new as the toolkit), so a GPU served only by PTX needs the full
   version. R570 drivers support CUDA 12.8; CUDA 13 needs R580.

All nodes of a job are assumed to carry the same GPU model: the probe looks at the first
visible device.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from ddpimg.errors import DdpimgError

if TYPE_CHECKING:
    from ddpimg.hardware.builds import TorchBuild

Vendor = Literal["nvidia", "amd"]
Arch = tuple[int, int]

_ARCH_FLAG = re.compile(r"(sm|compute)_(\d+)([a-z]?)\Z")
_NVRM_VERSION = re.compile(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)")
AMD_PCI_VENDOR = "0x1002"
NVIDIA_PCI_VENDOR = "0x10de"


class HardwareError(DdpimgError):
    """The image's torch build cannot drive this machine's GPU (exit status 2)."""


@dataclass(frozen=True)
class GpuInfo:
    """What the probe found about the first GPU. ``capability`` is None when torch cannot
    use the device (another vendor's build, a driver too old); ``driver_cuda`` is the CUDA
    version the driver supports, e.g. (12, 8); ``driver_version`` the kernel module's,
    e.g. ``570.124.06`` (empty when unknown)."""

    vendor: Vendor
    name: str
    capability: Arch | None = None
    driver_cuda: Arch | None = None
    driver_version: str = ""


@dataclass(frozen=True)
class ImageBuild:
    """The torch inside the image: its version, CUDA or HIP version, and the architectures
    its kernels are compiled for (``torch._C._cuda_getArchFlags()``: ``sm_75 ... sm_120``,
    PTX as ``compute_XY``)."""

    torch_version: str
    cuda_version: str | None
    hip_version: str | None
    arch_flags: tuple[str, ...] = ()

    @property
    def vendor(self) -> Vendor | None:
        if self.hip_version:
            return "amd"
        return "nvidia" if self.cuda_version else None

    def describe(self) -> str:
        if self.hip_version:
            return f"torch {self.torch_version}, ROCm {self.hip_version}"
        if self.cuda_version:
            return f"torch {self.torch_version}, CUDA {self.cuda_version}"
        return f"torch {self.torch_version}, CPU only"


class GpuProbe(Protocol):
    """Reports the GPU of this machine and the torch build of this image."""

    def gpu(self) -> GpuInfo | None: ...

    def image(self) -> ImageBuild: ...


def parse_arch_flags(flags: Iterable[str]) -> tuple[tuple[Arch, ...], tuple[Arch, ...]]:
    """(SASS architectures, PTX architectures) of flags like ``sm_86`` and ``compute_90``.
    Arch-specific targets (``sm_90a``) run only on their own architecture and are kept out of
    both lists, which are about forward compatibility."""
    sass: list[Arch] = []
    ptx: list[Arch] = []
    for flag in flags:
        match = _ARCH_FLAG.match(flag.strip())
        if match is None or match[3]:
            continue
        number = int(match[2])
        arch = (number // 10, number % 10)
        (sass if match[1] == "sm" else ptx).append(arch)
    return tuple(sass), tuple(ptx)


def sm(arch: Arch) -> str:
    return f"sm_{arch[0]}{arch[1]}"


def runs_on(capability: Arch, sass: Iterable[Arch], ptx: Iterable[Arch]) -> str | None:
    """How code of these architectures runs on a GPU of ``capability``: ``"sass"``, ``"ptx"``
    (JIT-compiled by the driver), or None (it does not)."""
    if any(a[0] == capability[0] and a[1] <= capability[1] for a in sass):
        return "sass"
    if any(a <= capability for a in ptx):
        return "ptx"
    return None


def _arch_span(sass: tuple[Arch, ...]) -> str:
    ordered = sorted(sass)
    if not ordered:
        return "(none)"
    return sm(ordered[0]) if len(ordered) == 1 else f"{sm(ordered[0])}..{sm(ordered[-1])}"


def _version(text: str | None) -> Arch | None:
    if not text:
        return None
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def _driver_words(gpu: GpuInfo) -> str:
    if gpu.driver_version and gpu.driver_cuda:
        return f"driver {gpu.driver_version} (CUDA {gpu.driver_cuda[0]}.{gpu.driver_cuda[1]})"
    if gpu.driver_cuda:
        return f"a driver for CUDA {gpu.driver_cuda[0]}.{gpu.driver_cuda[1]}"
    if gpu.driver_version:
        return f"driver {gpu.driver_version}"
    return "an unknown driver"


def build_fits(build: TorchBuild, gpu: GpuInfo) -> bool:
    """Whether ``build`` (a flavour of the image) can drive ``gpu``."""
    if build.vendor != gpu.vendor:
        return False
    if gpu.vendor == "amd":
        return True
    if gpu.capability is not None:
        ptx = (build.ptx_arch,) if build.ptx_arch else ()
        how = runs_on(gpu.capability, build.archs, ptx)
        if how is None:
            return False
    wanted = _version(build.cuda_version)
    if gpu.driver_cuda is not None and wanted is not None:
        return gpu.driver_cuda[0] >= wanted[0]
    if gpu.driver_version and build.min_driver is not None:
        major = _version(gpu.driver_version)
        return major is not None and major[0] >= build.min_driver
    return True


def suggest_build(gpu: GpuInfo, builds: Mapping[str, TorchBuild]) -> str:
    """The hint: the first flavour (in ``builds`` order) that fits, or why none does."""
    fitting = [b for b in builds.values() if build_fits(b, gpu)]
    if not fitting:
        return (
            f"no image flavour of this project fits {gpu.name}; see docs/sites.md "
            "for which flavour each site needs"
        )
    best = fitting[0]
    if best.vendor == "amd":
        return (
            f"use the {best.name} image {best.image_tag}: AMD GPUs (LUMI) need a ROCm build of "
            "torch, which this project cannot build yet (docs/sites.md, LUMI)"
        )
    return f"use the {best.name} image {best.image_tag}"


def check_compatibility(
    gpu: GpuInfo | None, image: ImageBuild, builds: Mapping[str, TorchBuild]
) -> HardwareError | None:
    """Why ``image`` cannot drive ``gpu`` (an error to raise), or None. Pure."""
    if gpu is None:
        return None
    what = image.describe()
    if image.vendor is None:
        return None  # the CPU image on a GPU node: a deliberate choice
    if image.vendor != gpu.vendor:
        if gpu.vendor == "amd":
            found = (
                f"{gpu.name} is an AMD GPU, but this image's torch is a CUDA build ({what}): "
                "it sees no GPU and would train on the CPU"
            )
        else:
            found = f"{gpu.name} is an NVIDIA GPU, but this image's torch is a ROCm build ({what})"
        return HardwareError(
            found, hint=f"{suggest_build(gpu, builds)}; or run the CPU image (ddpimg:cpu)"
        )
    if gpu.vendor == "amd":
        return None  # gfx architectures of ROCm builds: not checked yet
    driver = _driver_words(gpu)
    wanted = _version(image.cuda_version)
    if gpu.driver_cuda is not None and wanted is not None and gpu.driver_cuda[0] < wanted[0]:
        return HardwareError(
            f"{gpu.name} has {driver}, but this image's torch needs CUDA {image.cuda_version} "
            f"({what}); CUDA {wanted[0]}.x needs a driver for CUDA {wanted[0]}.0 or newer",
            hint=f"{suggest_build(gpu, builds)}, or ask the site for a newer driver",
        )
    if gpu.capability is None:
        return None
    sass, ptx = parse_arch_flags(image.arch_flags)
    label = f"{gpu.name} ({sm(gpu.capability)})"
    how = runs_on(gpu.capability, sass, ptx)
    if how is None:
        return HardwareError(
            f"{label} is not in this build's arch list {_arch_span(sass)} ({what}; {driver})",
            hint=suggest_build(gpu, builds),
        )
    if (
        how == "ptx"
        and gpu.driver_cuda is not None
        and wanted is not None
        and gpu.driver_cuda < wanted
    ):
        return HardwareError(
            f"{label} runs this build ({what}) only through PTX compiled by the driver, and "
            f"{driver} is older than CUDA {image.cuda_version}: minor-version compatibility "
            "does not cover PTX",
            hint=f"ask the site for a driver for CUDA {image.cuda_version}, or "
            f"{suggest_build(gpu, builds)}",
        )
    return None


def require_compatible(probe: GpuProbe, builds: Mapping[str, TorchBuild] | None = None) -> None:
    """Raise :class:`HardwareError` when the image cannot drive this machine's GPU."""
    if builds is None:
        from ddpimg.hardware.builds import BUILDS

        builds = BUILDS
    problem = check_compatibility(probe.gpu(), probe.image(), builds)
    if problem is not None:
        raise problem


def nvidia_driver_version(text: str) -> str:
    """The kernel module's version from ``/proc/driver/nvidia/version``, or ``""``."""
    match = _NVRM_VERSION.search(text)
    return match[1] if match else ""


def driver_cuda_version(encoded: int) -> Arch | None:
    """``cudaDriverGetVersion``'s integer (12080) as (12, 8); None for 0 (no driver)."""
    if encoded <= 0:
        return None
    return encoded // 1000, (encoded % 1000) // 10


def pci_gpu_vendors(sys_root: Path = Path("/sys")) -> set[str]:
    """PCI vendor ids (``0x10de``, ``0x1002``) of the display controllers sysfs lists."""
    vendors: set[str] = set()
    for device in (sys_root / "bus" / "pci" / "devices").glob("*"):
        try:
            pci_class = (device / "class").read_text().strip()
            vendor = (device / "vendor").read_text().strip()
        except OSError:
            continue
        # 0x03xxxx: display controllers (VGA 0x0300, 3D 0x0302); MI250X shows as 0x1200
        # (processing accelerator).
        if pci_class.startswith(("0x03", "0x12")):
            vendors.add(vendor)
    return vendors


class TorchProbe:
    """The real probe: torch for the build and the device, ``/proc`` and ``/sys`` for what
    torch cannot see (a GPU of the other vendor, a driver too old for the build)."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root

    def image(self) -> ImageBuild:
        import torch

        flags: tuple[str, ...] = ()
        if torch.version.cuda or getattr(torch.version, "hip", None):
            flags = tuple((torch._C._cuda_getArchFlags() or "").split())
        return ImageBuild(
            torch_version=torch.__version__.split("+", 1)[0],
            cuda_version=torch.version.cuda,
            hip_version=getattr(torch.version, "hip", None),
            arch_flags=flags,
        )

    def _driver_version(self) -> str:
        try:
            text = (self.root / "proc" / "driver" / "nvidia" / "version").read_text()
        except OSError:
            return ""
        return nvidia_driver_version(text)

    def _driver_cuda(self) -> Arch | None:
        import ctypes

        import torch

        if not torch.version.cuda:
            return None
        try:
            cudart = ctypes.CDLL("libcudart.so." + torch.version.cuda.split(".")[0])
            version = ctypes.c_int(0)
            if cudart.cudaDriverGetVersion(ctypes.byref(version)) != 0:
                return None
        except OSError:
            return None
        return driver_cuda_version(version.value)

    def gpu(self) -> GpuInfo | None:
        import torch

        vendors = pci_gpu_vendors(self.root / "sys")
        if torch.cuda.is_available():
            vendor: Vendor = "amd" if getattr(torch.version, "hip", None) else "nvidia"
            capability = torch.cuda.get_device_capability(0)
            return GpuInfo(
                vendor=vendor,
                name=torch.cuda.get_device_name(0),
                capability=(capability[0], capability[1]),
                driver_cuda=self._driver_cuda() if vendor == "nvidia" else None,
                driver_version=self._driver_version() if vendor == "nvidia" else "",
            )
        if NVIDIA_PCI_VENDOR in vendors:
            return GpuInfo(
                vendor="nvidia",
                name="an NVIDIA GPU",
                driver_cuda=self._driver_cuda(),
                driver_version=self._driver_version(),
            )
        if AMD_PCI_VENDOR in vendors and (self.root / "dev" / "kfd").exists():
            return GpuInfo(vendor="amd", name="an AMD GPU (/dev/kfd present)")
        return None
