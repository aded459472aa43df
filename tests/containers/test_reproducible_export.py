"""The reproducible image and its squashfs under the real Docker engine, on tiny images (a
few files; the real image's twice-built comparison is `nox -s image-repro`, its squashfs
`nox -s sqsh -- ddpimg:cpu --twice`): the same files built twice, with other times and
owner names, give one digest and one squashfs; a changed file gives another and is named.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.imagebuild import reproduce, squashfs
from containers.imagebuild.rootfs import iso_date

pytestmark = pytest.mark.docker

EPOCH = 1_795_968_190
REPOSITORY = f"ddpimg-test-reproducible-{os.getpid()}"
FILES = {"opt/app/run": b"#!/bin/sh\necho hi\n", "opt/app/data": b"x" * 5000}
CHANGES = ["ENV PATH=/opt/app:/usr/bin", 'ENTRYPOINT ["/opt/app/run"]', "WORKDIR /tmp"]


def docker(*args: str, stdin: bytes | None = None) -> str:
    proc = subprocess.run(["docker", *args], input=stdin, capture_output=True, timeout=120,
                          check=True)  # fmt: skip
    return proc.stdout.decode().strip()


def import_files(files: dict[str, bytes], mtime: int, owner: str) -> str:
    """`docker import` of a tar of ``files`` (and their directories) at ``mtime``, owned by
    ``owner``: two such imports stand for two builds of the same files. The image's ID."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("opt", "opt/app", "tmp"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime, info.uname = tarfile.DIRTYPE, 0o755, mtime, owner
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime, info.uname = len(data), 0o755, mtime, owner
            tar.addfile(info, io.BytesIO(data))
    changes = [word for change in CHANGES for word in ("--change", change)]
    return docker("import", *changes, "-", stdin=out.getvalue())


@pytest.fixture(scope="module")
def images() -> Iterator[dict[str, str]]:
    """Three one-layer images made reproducible: ``a`` and ``b`` of the same files built at
    other times by other users, ``c`` with one file changed; tag by name."""
    built = {
        "a": import_files(FILES, 1_700_000_000, "root"),
        "b": import_files(FILES, 1_800_000_000, "builder"),
        "c": import_files(FILES | {"opt/app/data": b"y" * 5000}, 1_700_000_000, "root"),
    }
    tags = {name: f"{REPOSITORY}:{name}" for name in built}
    try:
        for name, layered in built.items():
            reproduce.normalise(layered, tags[name], EPOCH)
        yield tags
    finally:
        subprocess.run(["docker", "image", "rm", "-f", *built.values(), *tags.values()],
                       capture_output=True, check=False)  # fmt: skip


def test_two_builds_of_the_same_files_have_one_digest(images: dict[str, str]) -> None:
    first, second = (reproduce.inspect(images[name]) for name in "ab")
    assert first["Id"] == second["Id"]
    assert first["RootFS"]["Layers"] == second["RootFS"]["Layers"]
    assert len(first["RootFS"]["Layers"]) == 1
    assert first["Created"] == iso_date(EPOCH)
    assert first["Config"]["Entrypoint"] == ["/opt/app/run"]


def test_a_changed_file_changes_the_digest_and_is_named(images: dict[str, str]) -> None:
    assert reproduce.inspect(images["a"])["Id"] != reproduce.inspect(images["c"])["Id"]
    assert reproduce.compare_images(images["a"], images["c"]) == ["content differ: /opt/app/data"]


def test_two_squashfs_exports_have_one_sha256_with_enroots_files(
    images: dict[str, str], tmp_path: Path
) -> None:
    first = squashfs.export(images["a"], tmp_path / "a.sqsh")
    second = squashfs.export(images["b"], tmp_path / "b.sqsh")
    assert first == second
    listing = subprocess.run(
        ["unsquashfs", "-lls", "-UTC", str(tmp_path / "a.sqsh")],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    lines = [line for line in listing.splitlines() if "squashfs-root/" in line]
    names = {line.split("squashfs-root/", 1)[1].split(" ")[0] for line in lines}
    assert {"etc/environment", "etc/rc", "etc/rc.local", "etc/fstab", "opt/app/run"} <= names
    assert all(" 2026-11-29 16:03 " in line for line in lines)
    assert all(" root/root " in line for line in lines)
