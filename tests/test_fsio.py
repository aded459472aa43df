"""Durable writes: the old file or the new one, never a part, and no temporary left over."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.fsio import check_new, fsync_tree, open_own, write_json_atomic, write_text_atomic


def test_write_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "manifest.json"
    target.write_text("old", encoding="utf-8")
    write_json_atomic(target, {"status": "completed", "exit_status": 0})
    assert json.loads(target.read_text(encoding="utf-8")) == {
        "exit_status": 0,
        "status": "completed",
    }
    assert os.listdir(tmp_path) == ["manifest.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "metrics.jsonl"
    target.write_text("kept\n", encoding="utf-8")

    def full_disk(descriptor: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_text_atomic(target, "new\n")
    assert target.read_text(encoding="utf-8") == "kept\n"
    assert os.listdir(tmp_path) == ["metrics.jsonl"]


def test_fsync_tree_visits_files_and_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "rank0").mkdir()
    (tmp_path / "rank0" / "model.pt").write_bytes(b"\0")
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    fsync_tree(tmp_path)
    assert len(synced) == 3  # the file, its folder, the root


def test_a_replaced_link_is_replaced_never_written_through(tmp_path: Path) -> None:
    """A link at the name (to a file outside the run) is replaced by the new file; the
    file it pointed at is left as it was."""
    outside = tmp_path / "outside.txt"
    outside.write_text("mine", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").symlink_to(outside)
    write_text_atomic(run / "manifest.json", "new")
    assert outside.read_text(encoding="utf-8") == "mine"
    assert not (run / "manifest.json").is_symlink()
    assert (run / "manifest.json").read_text(encoding="utf-8") == "new"


def test_the_temporary_name_is_fresh_so_no_planted_link_is_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temporary file was .NAME.PID.tmp, a name anyone could plant a link under."""
    outside = tmp_path / "outside.txt"
    outside.write_text("mine", encoding="utf-8")
    (tmp_path / f".manifest.json.{os.getpid()}.tmp").symlink_to(outside)
    write_text_atomic(tmp_path / "manifest.json", "new")
    assert outside.read_text(encoding="utf-8") == "mine"


@pytest.mark.parametrize("kind", ["file", "link", "dangling link"])
def test_an_existing_output_is_replaced_only_when_forced(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "plot.png"
    other = tmp_path / "other.png"
    if kind == "file":
        target.write_bytes(b"old")
    else:
        if kind == "link":
            other.write_bytes(b"keep")
        target.symlink_to(other)
    with pytest.raises(DdpimgError, match=r"-o .*plot.png: a .* is there already; nothing"):
        check_new(target, force=False, flag="-o")
    check_new(target, force=True, flag="-o")
    check_new(tmp_path / "new.png", force=False, flag="-o")
    with pytest.raises(DdpimgError, match=r"a directory is there"):
        check_new(tmp_path, force=True, flag="-o")


def test_a_run_file_written_in_place_is_never_a_link_or_a_fifo(tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text("", encoding="utf-8")
    (tmp_path / "metrics.jsonl").symlink_to(outside)
    with pytest.raises(DdpimgError, match=r"metrics.jsonl is a link to .*outside.jsonl"):
        open_own(tmp_path / "metrics.jsonl", append=True)
    os.mkfifo(tmp_path / "fifo.jsonl")
    with pytest.raises(DdpimgError, match=r"fifo.jsonl is a link or a FIFO"):
        open_own(tmp_path / "fifo.jsonl", append=False)
    with open_own(tmp_path / "own.jsonl", append=True) as stream:
        stream.write("line\n")
    assert (tmp_path / "own.jsonl").read_text(encoding="utf-8") == "line\n"
