"""The flavour table agrees with the lock files, and its look-ups read torch's own strings.

That it agrees with the images' real architecture lists is checked inside the images:
tests/containers/test_flavours.py (`nox -s flavours`).
"""

from __future__ import annotations

import dataclasses

import pytest

from ddpimg.hardware.builds import BUILDS, TorchBuild, build_for_torch
from tests.containers.recipes import CONTAINERS
from tests.containers.test_lock import entries

LOCKED = [build for build in BUILDS.values() if build.lock is not None]


def locked_version(lock: str, package: str) -> str:
    variants = entries(CONTAINERS / "lock" / f"{lock}.txt")[package]
    versions = {version for version, _ in variants}
    assert len(versions) == 1, f"{lock}.txt: {package} has several versions {versions}"
    return versions.pop()


def test_names_are_the_keys() -> None:
    assert {name: build.name for name, build in BUILDS.items()} == {n: n for n in BUILDS}
    assert set(BUILDS) == {"cuda13", "cuda12", "cuda13-arm64", "rocm"}


@pytest.mark.parametrize("build", LOCKED, ids=lambda b: b.name)
def test_torch_is_the_one_its_lock_pins(build: TorchBuild) -> None:
    assert build.lock is not None
    assert locked_version(build.lock, "torch") == build.torch_version


@pytest.mark.parametrize("build", LOCKED, ids=lambda b: b.name)
def test_cuda_is_the_runtime_its_lock_pins(build: TorchBuild) -> None:
    """torch's CUDA version is that of the CUDA runtime wheel it depends on (13.0.96 -> 13.0)."""
    assert build.lock is not None
    locked = entries(CONTAINERS / "lock" / f"{build.lock}.txt")
    runtime = [name for name in locked if name.startswith("nvidia-cuda-runtime")]
    assert len(runtime) == 1, f"{build.lock}.txt: CUDA runtime wheels {runtime}"
    version = locked_version(build.lock, runtime[0])
    assert ".".join(version.split(".")[:2]) == build.cuda_version


def test_every_committed_gpu_lock_is_a_flavour() -> None:
    committed = {path.stem for path in (CONTAINERS / "lock").glob("*.txt")}
    # The cpu lock (PyTorch's CPU index) is a CPU build: no GPU flavour to describe.
    assert committed - {"cpu"} == {build.lock for build in LOCKED}


@pytest.mark.parametrize("build", list(BUILDS.values()), ids=lambda b: b.name)
def test_each_build_is_consistent(build: TorchBuild) -> None:
    assert list(build.archs) == sorted(set(build.archs))
    nvidia = build.vendor == "nvidia"
    assert (build.cuda_version is not None) == nvidia
    assert (build.min_driver is not None) == nvidia
    if nvidia:
        assert build.archs
    assert dataclasses.is_dataclass(build)
    with pytest.raises(dataclasses.FrozenInstanceError):
        build.torch_version = "0"  # type: ignore[misc]


def test_only_cuda12_covers_the_v100() -> None:
    """The reason the CUDA 12.8 flavour exists: V100 sites (Palmetto, Puhti, HDF-ML)."""
    assert (7, 0) in BUILDS["cuda12"].archs
    assert (7, 0) not in BUILDS["cuda13"].archs
    assert BUILDS["cuda12"].min_driver < BUILDS["cuda13"].min_driver  # type: ignore[operator]


def test_the_arm64_flavour_drives_the_gh200() -> None:
    """GH200 (JUPITER, Alps, Isambard-AI, Roihu): an aarch64 CPU and an sm 9.0 GPU."""
    build = BUILDS["cuda13-arm64"]
    assert build.machine == "aarch64"
    assert (9, 0) in build.archs
    assert build.min_driver == BUILDS["cuda13"].min_driver


def test_one_torch_build_is_one_flavour_per_machine() -> None:
    """What build_for_torch tells apart: the same torch release may ship for two machines."""
    keys = [(b.torch_version, b.cuda_version, b.machine) for b in LOCKED]
    assert len(keys) == len(set(keys))


def test_the_table_cannot_be_changed() -> None:
    with pytest.raises(TypeError):
        BUILDS["cuda11"] = BUILDS["cuda12"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("torch_version", "cuda", "hip", "machine", "expected"),
    [
        ("2.14.1+cu130", "13.0", None, "x86_64", "cuda13"),  # torch.__version__ of PyPI's wheel
        ("2.14.1", "13.0", None, "x86_64", "cuda13"),
        ("2.14.1+cu130", "13.0", None, "aarch64", "cuda13-arm64"),  # the same release on Arm
        ("2.10.0+cu128", "12.8", None, "x86_64", "cuda12"),
        ("2.10.0", "12.8.1", None, "x86_64", "cuda12"),  # a three-part CUDA version
        ("2.10.0+cu128", "12.8", None, "aarch64", None),  # no CUDA 12.8 image for Arm
        ("2.14.1", "12.6", None, "x86_64", None),  # PyTorch's cu126 index: not an image of ours
        ("2.10.0", "13.0", None, "x86_64", None),
        ("2.13.0", "13.0", None, "aarch64", None),
        ("2.14.1+cpu", None, None, "x86_64", None),  # CPU-only torch: no GPU flavour
        ("2.14.1", "13.0", None, "ppc64le", None),
        ("2.9.0+rocm6.4", None, "6.4.43482", "x86_64", "rocm"),
        ("2.9.0+rocm6.4", None, "6.4.43482", "aarch64", None),
    ],
)
def test_build_for_torch(
    torch_version: str, cuda: str | None, hip: str | None, machine: str, expected: str | None
) -> None:
    found = build_for_torch(torch_version, cuda, hip, machine)
    assert (found.name if found else None) == expected


def test_build_for_torch_rejects_cuda_and_hip_at_once() -> None:
    with pytest.raises(ValueError, match=r"reports both CUDA 12\.8 and HIP 6\.4"):
        build_for_torch("2.10.0", "12.8", "6.4", "x86_64")
