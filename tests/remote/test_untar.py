"""A tar stream from the login node, written trusting nothing of it: only regular files under
the names asked for, never through a link, within the run's directory, bounded."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.remote.untar import clean_name, unpack


def stream(
    *members: tuple[str, bytes, bytes, str], pax: dict[str, str] | None = None
) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, kind, link in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            if pax:
                info.pax_headers = pax
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    buffer.seek(0)
    return buffer


def regular(name: str, data: bytes = b"x") -> tuple[str, bytes, bytes, str]:
    return (name, data, tarfile.REGTYPE, "")


def everything(name: str) -> bool:
    return True


def test_only_regular_files_inside_are_written(tmp_path: Path) -> None:
    target = tmp_path / "run"
    done = unpack(
        stream(
            regular("./manifest.json", b"{}"),
            regular("../escape"),
            regular(f"{tmp_path}/abs"),
            regular("a/../../up"),
            ("link", b"", tarfile.SYMTYPE, "/etc/passwd"),
            ("hard", b"", tarfile.LNKTYPE, "/etc/passwd"),
            ("fifo", b"", tarfile.FIFOTYPE, ""),
            ("dev", b"", tarfile.CHRTYPE, ""),
            regular("bad\nname"),
            ("dir", b"", tarfile.DIRTYPE, ""),
            regular("dir/inner.txt", b"in"),
        ),
        target,
        everything,
        10**6,
    )
    assert sorted(done.written) == ["dir/inner.txt", "manifest.json"]
    assert done.skipped == [
        "../escape",
        f"{tmp_path}/abs",
        "a/../../up",
        "link",
        "hard",
        "fifo",
        "dev",
        "bad\\nname",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert not any(p.is_symlink() for p in target.rglob("*"))


def test_only_accepted_names(tmp_path: Path) -> None:
    done = unpack(
        stream(regular("keep"), regular("drop")), tmp_path, lambda name: name == "keep", 100
    )
    assert (done.written, done.skipped) == (["keep"], ["drop"])


def test_a_link_planted_in_the_target_is_not_followed(tmp_path: Path) -> None:
    target, outside = tmp_path / "run", tmp_path / "outside"
    target.mkdir()
    outside.mkdir()
    (target / "wandb").symlink_to(outside)
    (target / "metrics.jsonl").symlink_to(tmp_path / "victim")
    with pytest.raises(DdpimgError, match=r"wandb/f: wandb is a link or not a directory"):
        unpack(stream(regular("metrics.jsonl", b"m"), regular("wandb/f")), target, everything, 100)
    assert not list(outside.iterdir())
    assert not (tmp_path / "victim").exists()
    assert (target / "metrics.jsonl").read_bytes() == b"m"
    assert not (target / "metrics.jsonl").is_symlink()


def test_sizes_are_bounded(tmp_path: Path) -> None:
    with pytest.raises(DdpimgError, match="would pass the limit of 10 bytes"):
        unpack(stream(regular("a", b"123456"), regular("b", b"123456")), tmp_path, everything, 10)
    assert (tmp_path / "a").exists()
    assert not (tmp_path / "b").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    huge = stream(regular("a"), pax={"comment": "x" * (3 << 20)})
    with pytest.raises(DdpimgError, match="the stream is larger than asked for"):
        unpack(huge, tmp_path / "pax", everything, 10**9)


def test_not_a_tar_and_a_stream_cut_inside_a_file(tmp_path: Path) -> None:
    with pytest.raises(DdpimgError, match="not a tar archive"):
        unpack(io.BytesIO(b"\x1b[2J" * 300), tmp_path / "a", everything, 100)
    cut = io.BytesIO(stream(regular("big", b"y" * 5000)).getvalue()[:2048])
    with pytest.raises(DdpimgError):
        unpack(cut, tmp_path / "b", everything, 10**6)
    assert not [p for p in (tmp_path / "b").rglob("*") if p.is_file()]


@pytest.mark.parametrize(
    ("name", "clean"),
    [
        ("./a/b", "a/b"),
        ("a//b/./c", "a/b/c"),
        ("/a", None),
        ("a/../b", None),
        ("", None),
        (".", None),
        ("a\\b", None),
        ("a\x1b", None),
        ("/".join("d" * 40), None),
    ],
)
def test_clean_name(name: str, clean: str | None) -> None:
    assert clean_name(name) == clean


def test_nothing_is_written_outside_even_as_root(tmp_path: Path) -> None:
    # A directory of the file's name (planted, or an earlier fetch) is not replaced.
    (tmp_path / "run" / "manifest.json").mkdir(parents=True)
    with pytest.raises(DdpimgError, match=r"manifest\.json"):
        unpack(stream(regular("manifest.json")), tmp_path / "run", everything, 100)
    assert os.path.isdir(tmp_path / "run" / "manifest.json")
