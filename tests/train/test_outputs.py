from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import ddpimg
from ddpimg.buildinfo import image_identity, read_build_info
from ddpimg.errors import DdpimgError
from ddpimg.train.outputs import (
    MetricsWriter,
    RunRecorder,
    collect_versions,
    utc_now,
    write_json_atomic,
)
from ddpimg.train.progress import Progress


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    write_json_atomic(path, {"status": "running"})
    write_json_atomic(path, {"status": "completed", "exit_status": 0})
    assert json.loads(path.read_text()) == {"status": "completed", "exit_status": 0}
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_metrics_lines_are_whole_and_flushed(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("old run\n")
    writer = MetricsWriter(path)
    writer.write({"kind": "train", "step": 1})
    # Readable before close: a crash loses nothing already written.
    assert path.read_text() == '{"kind": "train", "step": 1}\n'
    writer.write({"kind": "eval", "epoch": 1})
    writer.close()
    assert [json.loads(line)["kind"] for line in path.read_text().splitlines()] == ["train", "eval"]


def test_build_info_absent_is_none(tmp_path: Path) -> None:
    assert read_build_info({"DDPIMG_BUILD_INFO": str(tmp_path / "none.json")}) is None


def test_build_info_is_read(tmp_path: Path) -> None:
    path = tmp_path / "build-info.json"
    path.write_text('{"image": "ddpimg:cpu", "git": "abc123"}')
    assert read_build_info({"DDPIMG_BUILD_INFO": str(path)}) == {
        "image": "ddpimg:cpu",
        "git": "abc123",
    }


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("{not json", "unreadable: not JSON (Expecting property name"),
        ("[1, 2]", "expected a JSON object, found list"),
    ],
)
def test_bad_build_info_is_recorded_not_fatal(tmp_path: Path, content: str, error: str) -> None:
    path = tmp_path / "build-info.json"
    path.write_text(content)
    info = read_build_info({"DDPIMG_BUILD_INFO": str(path)})
    assert info is not None
    assert info["path"] == str(path)
    assert info["error"].startswith(error)


def test_the_image_identity_is_the_records_flavour_locks_and_tree_digest() -> None:
    info = {
        "flavour": "cpu",
        "lock": {"name": "cpu", "sha256": "0" * 64},
        "apt_lock": {"name": "debian12-amd64", "section": "runtime-cpu", "sha256": "1" * 64},
        "tree": {"digest": "sha256:" + "2" * 64, "listing": "/etc/ddpimg/tree.txt"},
        "packages": {"torch": "2.13.0+cpu"},
    }
    assert image_identity(info) == {
        "flavour": "cpu",
        "lock": {"name": "cpu", "sha256": "0" * 64},
        "apt_lock": {"name": "debian12-amd64", "section": "runtime-cpu", "sha256": "1" * 64},
        "tree_digest": "sha256:" + "2" * 64,
    }
    # An image built before tree digests, none, an unreadable record.
    assert (image_identity({"flavour": "gpu"}) or {}).get("tree_digest") is None
    assert image_identity(None) is None
    assert image_identity({"path": "/etc/ddpimg/build-info.json", "error": "unreadable"}) is None


def test_versions(tmp_path: Path) -> None:
    import torch

    versions = collect_versions({"DDPIMG_BUILD_INFO": str(tmp_path / "none.json")})
    assert versions["torch"] == torch.__version__
    assert versions["ddpimg"] == ddpimg.__version__
    assert versions["image"] is None
    assert set(versions) == {"python", "torch", "cuda", "nccl", "deepspeed", "ddpimg", "image"}


def test_utc_now_is_iso_utc() -> None:
    assert utc_now().endswith("Z")
    assert utc_now()[10] == "T"


@pytest.mark.parametrize(
    ("existing", "keep", "kept"),
    [
        ('{"step": 1}\n{"step": 2}\n{"step": 3}\n', 2, ['{"step": 1}', '{"step": 2}']),
        # A line cut by a crash is not a line.
        ('{"step": 1}\n{"st', 5, ['{"step": 1}']),
        (None, 3, []),
    ],
)
def test_resumed_metrics_keep_the_lines_up_to_the_checkpoint(
    tmp_path: Path, existing: str | None, keep: int, kept: list[str]
) -> None:
    path = tmp_path / "metrics.jsonl"
    if existing is not None:
        path.write_text(existing)
    writer = MetricsWriter(path, keep_lines=keep)
    assert writer.lines == len(kept)
    writer.write({"step": 9})
    assert writer.sync() == len(kept) + 1
    writer.close()
    assert path.read_text().splitlines() == [*kept, '{"step": 9}']


def test_a_metrics_line_that_cannot_be_written_is_a_named_error(tmp_path: Path) -> None:
    """/dev/full answers every write with ENOSPC, as a full disk does (put behind the
    writer: the writer itself opens only a regular file, never a device)."""
    path = tmp_path / "metrics.jsonl"
    writer = MetricsWriter(path)
    writer._stream.close()
    writer._stream = Path("/dev/full").open("w", encoding="utf-8")  # noqa: SIM115
    with pytest.raises(DdpimgError, match=rf"^{path} could not be written \(No space left"):
        writer.write({"kind": "train", "loss": 1.0})
    assert writer.lines == 0
    writer.close()  # the line it could not write is dropped, not raised again


@pytest.mark.parametrize("keep", [None, 1])
def test_metrics_jsonl_is_never_written_through_a_link(tmp_path: Path, keep: int | None) -> None:
    """A run directory handed over with metrics.jsonl linked to a file outside it: train
    once wrote (or emptied) that file. Now nothing is read or written through the link."""
    outside = tmp_path / "notes.txt"
    outside.write_text("my notes\n", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").symlink_to(outside)
    with pytest.raises(DdpimgError, match=r"run/metrics.jsonl is a link to .*notes.txt"):
        MetricsWriter(run / "metrics.jsonl", keep_lines=keep)
    assert outside.read_text(encoding="utf-8") == "my notes\n"


def test_the_manifest_says_how_long_the_run_is(tmp_path: Path) -> None:
    """ddpimg follow tells the time left by it."""
    recorder = RunRecorder(tmp_path, {"status": "running"}, Progress(io.StringIO()))
    recorder.begin(40)
    assert json.loads((tmp_path / "manifest.json").read_text())["total_steps"] == 40
    recorder.finish("completed", 0)
