"""containers/imagebuild/aptlocks.py and install-system.sh's lock check: the image's Debian
packages locked by version per base, and a build stopped when the mirror has moved on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from containers.imagebuild import aptlocks, images, locks
from tests.containers.imagebuild.fakes import FakeSession
from tests.containers.recipes import CONTAINERS

INSTALL_SYSTEM = CONTAINERS / "scripts" / "install-system.sh"


@pytest.mark.parametrize(
    ("flavour", "local", "gpu_base", "lock"),
    [
        ("cpu", True, None, "debian12"),
        ("gpu", True, locks.CUDA_12_8_BASE, "debian12"),
        ("cpu", False, None, "python3.11-slim-bookworm"),
        ("gpu", False, None, "cuda13-ubuntu24.04"),
        ("gpu", False, locks.CUDA_12_8_BASE, "cuda12.8-ubuntu24.04"),
    ],
)
def test_each_build_takes_its_bases_lock(
    flavour: str, local: bool, gpu_base: str | None, lock: str
) -> None:
    assert aptlocks.apt_lock_of(flavour, local, gpu_base) == lock
    assert lock in aptlocks.APT_BASES


@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_the_local_bases_lock_is_committed_with_every_stage(arch: str) -> None:
    path = aptlocks.APT_LOCK_DIR / f"debian12-{arch}.txt"
    assert path in aptlocks.apt_lock_files("debian12")
    lines = [line.split() for line in path.read_text().splitlines() if not line.startswith("#")]
    sections = {fields[0] for fields in lines}
    assert sections == {
        "runtime-cpu", "runtime-gpu", "build-cpu-source", "build-cpu-wheel",
        "build-gpu-source", "build-gpu-wheel",
    }  # fmt: skip
    runtime_cpu = {name for section, name, _ in lines if section == "runtime-cpu"}
    assert {"openmpi-bin", "tini", "squashfs-tools", "libgomp1"} <= runtime_cpu
    assert "g++" not in runtime_cpu  # the cpu image has no compiler
    assert "g++" in {name for section, name, _ in lines if section == "runtime-gpu"}


def test_the_registry_bases_are_the_dockerfiles_defaults() -> None:
    assert aptlocks.images_of("python3.11-slim-bookworm") == [
        aptlocks.dockerfile_default("CPU_BASE")
    ]
    assert aptlocks.images_of("cuda13-ubuntu24.04")[0].startswith("nvidia/cuda:13.0.3-base")


def test_a_missing_lock_says_how_to_make_it(tmp_path: Path) -> None:
    assert aptlocks.missing_apt_lock("debian12", "amd64") is None
    reason = aptlocks.missing_apt_lock("cuda13-ubuntu24.04", "amd64", tmp_path)
    assert reason is not None
    assert "make it with `nox -s lock -- cuda13-ubuntu24.04`" in reason
    assert "--apt-unlocked" in reason


def test_the_lock_file_is_sorted_under_a_header_naming_the_base() -> None:
    text = aptlocks.lock_text("ddpimg-base:bookworm", "amd64", ["b x 1", "a y 2", "a y 2"])
    assert text.splitlines()[0].endswith("on ddpimg-base:bookworm (amd64): every package")
    assert text.splitlines()[-2:] == ["a y 2", "b x 1"]


def test_only_the_lock_lines_of_the_steps_output_are_kept() -> None:
    output = "Get:1 http://mirror bookworm InRelease\nruntime-cpu tini 0.19.0-1\nnoise\n"
    assert aptlocks.parse_lock_lines(output) == ["runtime-cpu tini 0.19.0-1"]


def test_lock_dispatches_pip_and_debian_names(
    session: FakeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(locks, "make", lambda s, names: made.append(("pip", list(names))))
    monkeypatch.setattr(aptlocks, "make", lambda s, names, named: made.append(("apt", names)))
    aptlocks.make_locks(session, ["cpu", "debian12"])
    aptlocks.make_locks(session, ["apt"])
    aptlocks.make_locks(session, [])
    assert made == [
        ("pip", ["cpu"]), ("apt", ["debian12"]),
        ("apt", sorted(aptlocks.APT_BASES)),
        ("pip", []), ("apt", sorted(aptlocks.APT_BASES)),
    ]  # fmt: skip


def test_a_build_names_its_lock_unless_unlocked() -> None:
    facts = {"REVISION": "r", "SOURCE_DATE_EPOCH": "1", "CREATED": "x", "VERSION": "0"}
    args = images.build_args(images.SMOKE_BUILD, facts)
    assert args["APT_LOCK"] == "debian12"
    unlocked = images.build_args(images.parse_image_options(["cpu", "--apt-unlocked"]), facts)
    assert "APT_LOCK" not in unlocked
    devel = images.parse_image_options(["gpu", "--ds-build-ops", "devel:1"])
    assert images.build_args(devel, facts)["BUILD_APT_LOCK"] == ""


# Stand-ins for apt and dpkg: the base has libc6 2.36-9; the mirror serves tini 0.19.0-2.
FAKE_APT_GET = """#!/bin/sh
case "$*" in
update) exit 0 ;;
*install\\ -s*) echo "Inst tini (0.19.0-2 Debian:12.12/stable [amd64])"; exit 0 ;;
*) echo "apt-get $* must not run: the lock check stops the build first" >&2; exit 99 ;;
esac
"""
FAKE_DPKG_QUERY = """#!/bin/sh
echo "ii  libc6 2.36-9"
"""
FAKE_DPKG = """#!/bin/sh
echo amd64
"""


@pytest.fixture
def fake_apt(tmp_path: Path) -> dict[str, str]:
    """PATH with the stand-ins for apt-get, dpkg-query and dpkg first, the cpu flavour's
    runtime stage, the lock files in ``tmp_path``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (
        ("apt-get", FAKE_APT_GET), ("dpkg-query", FAKE_DPKG_QUERY), ("dpkg", FAKE_DPKG)
    ):  # fmt: skip
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FLAVOUR": "cpu",
        "APT_LOCK_DIR": str(tmp_path),
    }


def _run(env: dict[str, str], lock: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(INSTALL_SYSTEM), "runtime"],
        env=env | {"APT_LOCK": lock},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_mirror_that_moved_on_stops_the_build_naming_package_versions_and_command(
    tmp_path: Path, fake_apt: dict[str, str]
) -> None:
    (tmp_path / "base-amd64.txt").write_text(
        "# a lock\nruntime-cpu libc6 2.36-9\nruntime-cpu tini 0.19.0-1\n"
    )
    proc = _run(fake_apt, "base")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "tini: the lock has 0.19.0-1, the mirror serves 0.19.0-2" in proc.stderr
    assert "libc6" not in proc.stderr  # the same version on both sides
    assert "make the lock again with `nox -s lock -- apt`" in proc.stderr
    assert "must not run" not in proc.stderr


def test_a_package_the_lock_lacks_stops_the_build(tmp_path: Path, fake_apt: dict[str, str]) -> None:
    (tmp_path / "base-amd64.txt").write_text("runtime-cpu libc6 2.36-9\n")
    proc = _run(fake_apt, "base")
    assert proc.returncode == 1
    assert "tini: the lock has (none), the mirror serves 0.19.0-2" in proc.stderr


def test_a_base_without_its_lock_file_or_section_stops_the_build(
    tmp_path: Path, fake_apt: dict[str, str]
) -> None:
    proc = _run(fake_apt, "other")
    assert proc.returncode == 1
    assert f"no Debian package lock {tmp_path}/other-amd64.txt for this base" in proc.stderr
    (tmp_path / "base-amd64.txt").write_text("runtime-gpu libc6 2.36-9\n")
    proc = _run(fake_apt, "base")
    assert proc.returncode == 1
    assert "has no section 'runtime-cpu'" in proc.stderr
