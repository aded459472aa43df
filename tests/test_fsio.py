"""Durable writes: the old file or the new one, never a part, and no temporary left over."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ddpimg.fsio import fsync_tree, write_json_atomic, write_text_atomic


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
