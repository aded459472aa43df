"""The GPU compatibility rules, with fake probes: one row per situation a site meets."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from ddpimg.hardware.builds import TorchBuild
from ddpimg.hardware.compat import (
    GpuInfo,
    HardwareError,
    ImageBuild,
    TorchProbe,
    check_compatibility,
    driver_cuda_version,
    nvidia_driver_version,
    parse_arch_flags,
    pci_gpu_vendors,
    require_compatible,
    runs_on,
)

CUDA13_ARCHS = ((7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (12, 0))
CUDA12_ARCHS = ((7, 0), *CUDA13_ARCHS)
# Fakes with the interface of ddpimg.hardware.builds, so these tests do not depend on the
# values the image branch settles on.
BUILDS: Mapping[str, TorchBuild] = {
    "cuda13": TorchBuild(
        "cuda13", "pypi", "2.14.1", "13.0", "nvidia", CUDA13_ARCHS, (12, 0), 580, "ddpimg:gpu"
    ),
    "cuda12": TorchBuild(
        "cuda12",
        "pypi-cu128",
        "2.10.0",
        "12.8",
        "nvidia",
        CUDA12_ARCHS,
        (12, 0),
        570,
        "ddpimg:gpu-cu128",
    ),
    "rocm": TorchBuild("rocm", "", "", None, "amd", (), None, None, "ddpimg:gpu-rocm"),
}
CUDA13 = ImageBuild(
    "2.14.1", "13.0", None, ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
)
CUDA13_PTX = ImageBuild("2.14.1", "13.0", None, (*CUDA13.arch_flags, "compute_120"))
CUDA12 = ImageBuild("2.10.0", "12.8", None, ("sm_70", *CUDA13.arch_flags))
ROCM = ImageBuild("2.10.0", None, "6.4", ("gfx90a",))
CPU = ImageBuild("2.14.1", None, None)

V100 = GpuInfo("nvidia", "Tesla V100-SXM2-32GB", (7, 0), (13, 0), "580.65.06")
H100 = GpuInfo("nvidia", "NVIDIA H100 80GB HBM3", (9, 0), (12, 8), "570.124.06")
A100_OLD_DRIVER = GpuInfo("nvidia", "NVIDIA A100-SXM4-40GB", (8, 0), (12, 8), "570.124.06")
MI250X = GpuInfo("amd", "an AMD GPU (/dev/kfd present)")


@pytest.mark.parametrize(
    ("gpu", "image", "message", "hint"),
    [
        (
            V100,
            CUDA13,
            r"Tesla V100-SXM2-32GB \(sm_70\) is not in this build's arch list sm_75\.\.sm_120 "
            r"\(torch 2\.14\.1, CUDA 13\.0; driver 580\.65\.06 \(CUDA 13\.0\)\)",
            r"use the cuda12 image ddpimg:gpu-cu128",
        ),
        (
            A100_OLD_DRIVER,
            CUDA13,
            r"NVIDIA A100-SXM4-40GB has driver 570\.124\.06 \(CUDA 12\.8\), but this image's "
            r"torch needs CUDA 13\.0 .*CUDA 13\.x needs a driver for CUDA 13\.0 or newer",
            r"use the cuda12 image ddpimg:gpu-cu128, or ask the site for a newer driver",
        ),
        (
            MI250X,
            CUDA13,
            r"an AMD GPU \(/dev/kfd present\) is an AMD GPU, but this image's torch is a CUDA "
            r"build \(torch 2\.14\.1, CUDA 13\.0\): it sees no GPU",
            r"use the rocm image ddpimg:gpu-rocm: AMD GPUs \(LUMI\) need a ROCm build of torch, "
            r"which this project cannot build yet",
        ),
        (
            GpuInfo("nvidia", "NVIDIA A100-SXM4-40GB", (8, 0), (12, 8), "570.124.06"),
            ROCM,
            r"is an NVIDIA GPU, but this image's torch is a ROCm build",
            r"use the cuda12 image ddpimg:gpu-cu128",
        ),
        (
            # A future GPU served only by PTX, with a driver of the right major version but an
            # older minor one: minor-version compatibility does not JIT newer PTX.
            GpuInfo("nvidia", "Future GPU", (13, 0), (13, 0), ""),
            ImageBuild("2.15.0", "13.2", None, CUDA13_PTX.arch_flags),
            r"Future GPU \(sm_130\) runs this build .* only through PTX .* minor-version "
            r"compatibility does not cover PTX",
            r"driver for CUDA 13\.2",
        ),
    ],
)
def test_mismatch_names_gpu_driver_and_flavour(
    gpu: GpuInfo, image: ImageBuild, message: str, hint: str
) -> None:
    problem = check_compatibility(gpu, image, BUILDS)
    assert problem is not None
    assert problem.hint is not None
    assert re.search(message, problem.message), problem.message
    assert re.search(hint, problem.hint), problem.hint


@pytest.mark.parametrize(
    ("gpu", "image"),
    [
        (H100, CUDA12),  # H100 (sm_90) on the CUDA 12.8 build with a 570 driver
        (V100, CUDA12),
        (GpuInfo("nvidia", "NVIDIA RTX PRO 6000", (12, 0), (13, 0), "580.65.06"), CUDA13),
        # A newer GPU than any SASS in the build runs the build's PTX.
        (GpuInfo("nvidia", "Future GPU", (13, 0), (13, 0), ""), CUDA13_PTX),
        # Same major, older minor driver: minor-version compatibility runs the SASS.
        (GpuInfo("nvidia", "NVIDIA H100", (9, 0), (12, 4), "550.54.15"), CUDA12),
        (GpuInfo("nvidia", "NVIDIA H100", (9, 0), (13, 0), ""), CUDA13),
        (MI250X, ROCM),
        (V100, CPU),  # the CPU image on a GPU node is a deliberate choice
        (None, CUDA13),  # no GPU: nothing to check
        (None, CPU),
    ],
)
def test_compatible(gpu: GpuInfo | None, image: ImageBuild) -> None:
    assert check_compatibility(gpu, image, BUILDS) is None


def test_newer_sass_minor_runs_on_same_major_only() -> None:
    assert runs_on((8, 6), [(8, 0)], []) == "sass"
    assert runs_on((8, 0), [(8, 6)], []) is None  # an older GPU cannot run newer SASS
    assert runs_on((9, 0), [(8, 0)], []) is None  # no SASS across major versions
    assert runs_on((9, 0), [(8, 0)], [(8, 0)]) == "ptx"


def test_arch_flags() -> None:
    assert parse_arch_flags(["sm_70", "sm_120", "sm_90a", "compute_120", "gfx90a"]) == (
        ((7, 0), (12, 0)),
        ((12, 0),),
    )


def test_driver_versions() -> None:
    text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Wed Feb 26 2025\n"
    assert nvidia_driver_version(text) == "570.124.06"
    assert nvidia_driver_version("garbage") == ""
    assert driver_cuda_version(12080) == (12, 8)
    assert driver_cuda_version(13000) == (13, 0)
    assert driver_cuda_version(0) is None


class FakeProbe:
    def __init__(self, gpu: GpuInfo | None, image: ImageBuild) -> None:
        self._gpu = gpu
        self._image = image

    def gpu(self) -> GpuInfo | None:
        return self._gpu

    def image(self) -> ImageBuild:
        return self._image


def test_require_compatible_raises_the_project_error() -> None:
    with pytest.raises(HardwareError, match=r"sm_70\) is not in this build's arch list"):
        require_compatible(FakeProbe(V100, CUDA13), BUILDS)
    require_compatible(FakeProbe(H100, CUDA12), BUILDS)


def test_cli_reports_a_mismatch_with_exit_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    from ddpimg.cli import report_error

    err = check_compatibility(MI250X, CUDA13, BUILDS)
    assert err is not None
    assert report_error(err) == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith("ddpimg: error: an AMD GPU")
    assert "hint: use the rocm image" in stderr


def test_pci_vendors_from_sysfs(tmp_path: Path) -> None:
    for name, pci_class, vendor in [
        ("0000:01:00.0", "0x030200", "0x10de"),
        ("0000:c1:00.0", "0x120000", "0x1002"),
        ("0000:00:1f.0", "0x060100", "0x8086"),
    ]:
        device = tmp_path / "bus" / "pci" / "devices" / name
        device.mkdir(parents=True)
        (device / "class").write_text(pci_class + "\n")
        (device / "vendor").write_text(vendor + "\n")
    assert pci_gpu_vendors(tmp_path) == {"0x10de", "0x1002"}


def test_real_probe_on_a_machine_without_gpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    probe = TorchProbe(root=tmp_path)  # an empty /sys and /proc: no GPU to see
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert probe.gpu() is None
    image = probe.image()
    assert image.torch_version == torch.__version__.split("+")[0]
    if torch.version.cuda:
        assert image.arch_flags  # the wheel's list, readable without a GPU


@pytest.mark.gpu
def test_real_probe_on_a_gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    probe = TorchProbe()
    gpu = probe.gpu()
    assert gpu is not None
    assert gpu.capability is not None
    assert gpu.driver_cuda is not None
    require_compatible(probe)  # the test environment's torch runs on its own GPU


def test_initialize_stops_before_the_rendezvous(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    pytest.importorskip("torch")
    from ddpimg import runtime
    from ddpimg.plan import build_plan

    opened: list[object] = []
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setattr(runtime, "open_store", lambda *args, **kwargs: opened.append(args))
    monkeypatch.setattr(runtime, "TorchProbe", lambda: FakeProbe(MI250X, CUDA13))
    plan = build_plan({}, "h", site="local")
    with pytest.raises(HardwareError, match="is an AMD GPU, but this image's torch is a CUDA"):
        runtime.initialize(plan, timeout_s=5)
    assert opened == []
