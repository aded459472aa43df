"""Checkpoint directories on disk: marker, verification, listing, publication, pruning."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from ddpimg.fsio import fsync_tree
from ddpimg.train.checkpoint.files import (
    MARKER,
    candidates,
    checkpoint_name,
    prune,
    publish,
    remove_leftovers,
    staging_name,
    step_of,
    verify,
    write_marker,
)


def make_checkpoint(root: Path, step: int, payload: bytes = b"weights" * 100) -> Path:
    """A complete checkpoint as the saver makes one: staging folder, marker, rename."""
    staging = root / staging_name(step)
    (staging / "ddp").mkdir(parents=True)
    (staging / "ddp" / "model.pt").write_bytes(payload)
    (staging / "loop.json").write_text(json.dumps({"step": step}))
    fsync_tree(staging)
    write_marker(staging, step)
    final = root / checkpoint_name(step)
    publish(staging, final)
    return final


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("step-00000040", 40),
        ("step-123456789", 123456789),
        (".step-00000040.tmp", None),
        ("step-40", None),
        ("step-00000040.old", None),
    ],
)
def test_step_of_reads_only_checkpoint_names(name: str, step: int | None) -> None:
    assert step_of(Path(name)) == step


def test_published_checkpoint_verifies_and_its_staging_folder_is_gone(tmp_path: Path) -> None:
    final = make_checkpoint(tmp_path, 40)
    assert final.name == "step-00000040"
    assert verify(final) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000040"]
    marker = json.loads((final / MARKER).read_text())
    assert marker["step"] == 40
    assert set(marker["files"]) == {"ddp/model.pt", "loop.json"}
    assert marker["files"]["ddp/model.pt"]["size"] == 700


def damage_truncate(path: Path) -> None:
    model = path / "ddp" / "model.pt"
    model.write_bytes(model.read_bytes()[:100])


def damage_flip(path: Path) -> None:
    model = path / "ddp" / "model.pt"
    data = bytearray(model.read_bytes())
    data[10] ^= 1
    model.write_bytes(bytes(data))


def damage_delete(path: Path) -> None:
    (path / "ddp" / "model.pt").unlink()


def damage_no_marker(path: Path) -> None:
    (path / MARKER).unlink()


def damage_marker_garbage(path: Path) -> None:
    (path / MARKER).write_text('{"format": 1, "files"')


def damage_marker_format(path: Path) -> None:
    (path / MARKER).write_text('{"format": 99, "files": {}}')


def damage_marker_empty(path: Path) -> None:
    (path / MARKER).write_text('{"format": 1, "step": 40, "files": {}}')


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (damage_truncate, r"ddp/model.pt has 100 bytes, complete.json says 700 \(truncated\?\)"),
        (damage_flip, r"ddp/model.pt does not match its SHA-256 in complete.json \(corrupt\)"),
        (damage_delete, r"ddp/model.pt is missing"),
        (damage_no_marker, r"has no complete.json \(the save did not finish"),
        (damage_marker_garbage, r"complete.json is unreadable"),
        (damage_marker_format, r"complete.json is not a format-1 marker"),
        (damage_marker_empty, r"complete.json lists no files"),
    ],
)
def test_verify_says_what_is_wrong(
    tmp_path: Path, damage: Callable[[Path], None], reason: str
) -> None:
    final = make_checkpoint(tmp_path, 40)
    damage(final)
    found = verify(final)
    assert found is not None
    assert re.search(reason, found), found


def test_verify_missing_and_non_directory(tmp_path: Path) -> None:
    assert verify(tmp_path / "nothing") == "does not exist"
    (tmp_path / "file").write_text("")
    assert verify(tmp_path / "file") == "is not a directory"


def test_candidates_are_newest_first_and_skip_other_names(tmp_path: Path) -> None:
    for step in (8, 120, 16):
        make_checkpoint(tmp_path, step)
    (tmp_path / staging_name(200)).mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "step-00000300").write_text("a file, not a checkpoint")
    assert [p.name for p in candidates(tmp_path)] == [
        "step-00000120",
        "step-00000016",
        "step-00000008",
    ]
    assert candidates(tmp_path / "absent") == []


def test_publish_replaces_a_checkpoint_of_the_same_step(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 8, payload=b"first")
    again = make_checkpoint(tmp_path, 8, payload=b"second")
    assert (again / "ddp" / "model.pt").read_bytes() == b"second"
    assert verify(again) is None
    assert [p.name for p in tmp_path.iterdir()] == ["step-00000008"]


def test_unpublished_staging_folder_is_no_checkpoint_and_is_cleaned(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 8)
    crashed = tmp_path / staging_name(16)
    (crashed / "ddp").mkdir(parents=True)
    (crashed / "ddp" / "model.pt").write_bytes(b"half")
    (tmp_path / ".step-00000008.replaced").mkdir()
    assert [p.name for p in candidates(tmp_path)] == ["step-00000008"]
    remove_leftovers(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["step-00000008"]


@pytest.mark.parametrize(
    ("steps", "keep", "current", "left"),
    [
        ([4, 8, 12, 16], 3, 16, [16, 12, 8]),
        ([4, 8, 12, 16], 1, 16, [16]),
        ([4, 8], 3, 8, [8, 4]),
        # Resumed from 8: the newer ones belong to an abandoned trajectory.
        ([4, 8, 12, 16], 3, 10, [8, 4]),
    ],
)
def test_prune_keeps_the_newest_up_to_the_current_step(
    tmp_path: Path, steps: list[int], keep: int, current: int, left: list[int]
) -> None:
    for step in steps:
        make_checkpoint(tmp_path, step)
    removed = prune(tmp_path, keep, current)
    assert [step_of(p) for p in candidates(tmp_path)] == left
    assert sorted(step_of(p) or 0 for p in removed) == sorted(set(steps) - set(left))
