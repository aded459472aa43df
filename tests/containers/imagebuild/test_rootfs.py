"""containers/imagebuild/rootfs.py: an exported file system written as one canonical tar."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import threading
from collections.abc import Sequence

import pytest

from containers.imagebuild import rootfs
from containers.imagebuild.rootfs import ExtraFile, ImageArchiveError

EPOCH = 1_795_968_190

# (name, type, mode, data or link target): a file system in Docker's export order.
TREE = [
    (".dockerenv", tarfile.REGTYPE, 0o755, b""),
    ("etc/", tarfile.DIRTYPE, 0o755, b""),
    ("etc/passwd", tarfile.REGTYPE, 0o644, b"root:x:0:0::/root:/bin/sh\n"),
    ("opt/", tarfile.DIRTYPE, 0o755, b""),
    ("opt/ddpimg/", tarfile.DIRTYPE, 0o755, b""),
    ("opt/ddpimg/a.so", tarfile.REGTYPE, 0o755, b"\x7fELF" * 300),
    ("opt/ddpimg/b.so", tarfile.LNKTYPE, 0o755, b"opt/ddpimg/a.so"),
    ("opt/ddpimg/python", tarfile.SYMTYPE, 0o777, b"/usr/bin/python3"),
    ("usr/", tarfile.DIRTYPE, 0o755, b""),
    ("usr/bin/", tarfile.DIRTYPE, 0o755, b""),
    ("usr/bin/ping", tarfile.REGTYPE, 0o4755, b"ping"),
]


def export(
    tree: Sequence[tuple[str, bytes, int, bytes]] = TREE,
    mtime: int = 1_700_000_000,
    uname: str = "root",
    xattrs: dict[str, str] | None = None,
) -> io.BytesIO:
    """A tar as `docker export` writes one: times of the build, names of the host's users."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, mode, data in tree:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = kind, mode, mtime
            info.uname = info.gname = uname
            info.pax_headers = {"atime": str(mtime + 5), "ctime": str(mtime + 9)}
            if name == "usr/bin/ping" and xattrs:
                info.pax_headers |= {f"SCHILY.xattr.{k}": v for k, v in xattrs.items()}
            if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = data.decode()
                tar.addfile(info)
            elif kind == tarfile.REGTYPE:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    out.seek(0)
    return out


def canonical(stream: io.BytesIO, **options: object) -> bytes:
    return b"".join(rootfs.canonical_chunks(stream, EPOCH, **options))


def members(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.getmembers()


def test_the_bytes_depend_on_the_files_not_on_times_or_user_names() -> None:
    first = canonical(export(mtime=1_700_000_000, uname="root"))
    second = canonical(export(mtime=1_800_000_000, uname="nobody"))
    assert first == second


def test_a_changed_file_changes_the_bytes() -> None:
    changed = [(n, k, m, b"other" if n == "etc/passwd" else d) for n, k, m, d in TREE]
    assert canonical(export()) != canonical(export(changed))


def test_every_entry_has_the_epoch_numeric_owners_and_no_other_pax_record() -> None:
    found = members(canonical(export(xattrs={"security.capability": "x"})))
    assert [m.name for m in found] == [
        "etc", "etc/passwd", "opt", "opt/ddpimg", "opt/ddpimg/a.so", "opt/ddpimg/b.so",
        "opt/ddpimg/python", "usr", "usr/bin", "usr/bin/ping",
    ]  # fmt: skip
    assert {m.mtime for m in found} == {EPOCH}
    assert {(m.uname, m.gname) for m in found} == {("", "")}
    ping = found[-1]
    assert ping.mode == 0o4755
    assert ping.pax_headers == {"SCHILY.xattr.security.capability": "x"}
    assert all(not m.pax_headers for m in found[:-1])


def test_a_hard_link_names_the_first_path_and_the_link_keeps_its_target() -> None:
    found = {m.name: m for m in members(canonical(export()))}
    assert found["opt/ddpimg/b.so"].islnk()
    assert found["opt/ddpimg/b.so"].linkname == "opt/ddpimg/a.so"
    assert found["opt/ddpimg/python"].linkname == "/usr/bin/python3"


def test_the_container_marker_is_dropped_and_a_kept_filter_applies() -> None:
    names = [m.name for m in members(canonical(export(), keep=lambda p: not p.startswith("usr")))]
    assert ".dockerenv" not in names
    assert "usr" not in names
    assert "etc/passwd" in names


def test_extra_files_go_in_their_sorted_place_and_replace_the_images() -> None:
    extra = [ExtraFile("etc/rc", b"exec train\n", 0o755), ExtraFile("etc/passwd", b"new\n")]
    data = canonical(export(), extra=extra)
    found = members(data)
    assert [m.name for m in found][:3] == ["etc", "etc/passwd", "etc/rc"]
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        passwd = tar.extractfile("etc/passwd")
        assert passwd is not None
        assert passwd.read() == b"new\n"
    assert found[2].mode == 0o755


def test_a_mode_adjustment_applies_to_every_entry() -> None:
    found = members(canonical(export(), adjust=lambda info: info.mode | 0o400))
    assert all(m.mode & 0o400 for m in found)


def test_an_export_out_of_order_is_refused() -> None:
    tree = [TREE[2], TREE[1]]  # a file before its directory
    with pytest.raises(ImageArchiveError, match="not in sorted order at 'etc'"):
        canonical(export(tree))


def test_a_member_that_leaves_the_root_is_refused() -> None:
    with pytest.raises(ImageArchiveError, match="leaves the root"):
        canonical(export([("../etc/passwd", tarfile.REGTYPE, 0o644, b"x")]))


def test_write_chunks_gives_the_layers_diff_id() -> None:
    out = io.BytesIO()
    diff_id, size = rootfs.write_chunks([b"ab", b"c"], out)
    assert diff_id == f"sha256:{hashlib.sha256(b'abc').hexdigest()}"
    assert (size, out.getvalue()) == (3, b"abc")


INSPECTED = {
    "Architecture": "amd64",
    "Os": "linux",
    "Created": "2026-12-07T08:00:00.123456789Z",
    "Container": "f" * 64,
    "DockerVersion": "20.10.24+dfsg1",
    "Config": {
        "Hostname": "ab12cd",
        "Image": "sha256:" + "1" * 64,
        "User": "ddp",
        "Env": ["PATH=/opt/ddpimg/venv/bin:/usr/bin"],
        "Entrypoint": ["/usr/bin/tini", "--"],
        "Cmd": ["train", "--help"],
        "WorkingDir": "/tmp",
        "Labels": {"org.opencontainers.image.revision": "abc"},
        "OnBuild": None,
    },
}


def test_the_config_keeps_the_runtime_settings_and_nothing_of_the_build() -> None:
    config = json.loads(rootfs.canonical_config(INSPECTED, "sha256:" + "2" * 64, EPOCH))
    assert config == {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": "ddp",
            "Env": ["PATH=/opt/ddpimg/venv/bin:/usr/bin"],
            "Entrypoint": ["/usr/bin/tini", "--"],
            "Cmd": ["train", "--help"],
            "WorkingDir": "/tmp",
            "Labels": {"org.opencontainers.image.revision": "abc"},
        },
        "created": "2026-11-29T16:03:10Z",
        "history": [{"created": "2026-11-29T16:03:10Z", "created_by": rootfs.HISTORY}],
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "2" * 64]},
    }


def test_the_config_bytes_do_not_depend_on_the_builds_own_fields() -> None:
    other = INSPECTED | {"Created": "2030-01-01T00:00:00Z", "Container": "e" * 64}
    other["Config"] = dict(INSPECTED["Config"]) | {"Hostname": "ef34", "Image": ""}
    diff_id = "sha256:" + "2" * 64
    assert rootfs.canonical_config(INSPECTED, diff_id, EPOCH) == rootfs.canonical_config(
        other, diff_id, EPOCH
    )


def test_an_export_read_from_a_pipe_gives_the_same_bytes() -> None:
    # `docker export` is a pipe: the reader seeks forward only, by reading.
    data = export().getvalue()
    with subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as cat:
        assert cat.stdin is not None
        assert cat.stdout is not None
        writer = threading.Thread(target=lambda: (cat.stdin.write(data), cat.stdin.close()))
        writer.start()
        piped = b"".join(rootfs.canonical_chunks(cat.stdout, EPOCH))
        writer.join()
    assert piped == canonical(export())


def test_the_forward_reader_skips_ahead_and_refuses_to_go_back() -> None:
    reader = rootfs.ForwardReader(io.BytesIO(bytes(range(10))))
    assert reader.read(2) == b"\x00\x01"
    assert reader.seek(5) == 5
    assert reader.read(1) == b"\x05"
    assert reader.seek(2, 1) == 8
    with pytest.raises(ImageArchiveError, match="backwards"):
        reader.seek(3)
    assert reader.seek(100) == 10  # past the end: at the end, as a file's read would find
