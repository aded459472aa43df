"""containers/imagebuild/reproduce.py without an engine: the archive `docker load` gets, and
what two images' file systems are compared by (tests/containers/test_reproducible_export.py
runs both under Docker)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from containers.imagebuild import reproduce


def test_the_config_archive_names_its_config_by_digest_and_the_tag(tmp_path: Path) -> None:
    config = b'{"architecture":"amd64"}'
    out = io.BytesIO()
    reproduce.write_config_archive(config, "ddpimg:cpu", out)
    out.seek(0)
    with tarfile.open(fileobj=out) as archive:
        names = archive.getnames()
        digest = hashlib.sha256(config).hexdigest()
        assert names == [f"{digest}.json", "manifest.json"]
        manifest = json.load(archive.extractfile("manifest.json"))
    assert manifest == [
        {"Config": f"{digest}.json", "RepoTags": ["ddpimg:cpu"], "Layers": ["layer.tar"]}
    ]


def test_the_full_archive_carries_the_layer_first(tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    layer.write_bytes(b"x" * 1000)
    out = io.BytesIO()
    reproduce.write_config_archive(b"{}", "t", out, layer)
    out.seek(0)
    with tarfile.open(fileobj=out) as archive:
        assert archive.getnames()[0] == "layer.tar"
        assert archive.extractfile("layer.tar").read() == b"x" * 1000


def exported(entries: dict[str, tuple[bytes, int]]) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, (data, mtime) in entries.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), mtime
            tar.addfile(info, io.BytesIO(data))
    out.seek(0)
    return out


def test_differences_name_each_path_and_what_differs() -> None:
    first = reproduce.file_facts(
        exported({"a": (b"1", 5), "b": (b"2", 5), "etc/hosts": (b"", 7), ".dockerenv": (b"", 7)})
    )
    second = reproduce.file_facts(
        exported({"a": (b"1", 6), "c": (b"3", 5), "etc/hosts": (b"", 9), ".dockerenv": (b"", 9)})
    )
    # The exporting container's own file and runtime files' times are not the image's.
    assert reproduce.differences(first, second) == [
        "only in the first: /b",
        "only in the second: /c",
        "mtime differ: /a",
    ]


def test_settings_differences_name_the_runtime_settings_that_differ() -> None:
    a = {"Architecture": "amd64", "Os": "linux", "Created": "x", "Config": {"User": "ddp"}}
    b = a | {"Config": {"User": "root", "Hostname": "other"}}
    assert reproduce.settings_differences(a, b) == ["config User differs: 'ddp' != 'root'"]
