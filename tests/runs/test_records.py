"""Reading run directories without trusting them: status, start, steps and loss, and what
makes a run unreadable rather than an error."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ddpimg.runs import records
from ddpimg.runs.records import list_runs, read_run


def make_run(
    path: Path, status: str | None = "completed", lines: list[dict[str, Any]] | None = None
) -> Path:
    path.mkdir(parents=True)
    if status is not None:
        manifest = {"status": status, "started_utc": "2026-11-29T03:15:00Z"}
        (path / "manifest.json").write_text(json.dumps(manifest))
    if lines is not None:
        (path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


TRAIN = [{"kind": "train", "step": step, "loss": 2.0 / step} for step in (1, 2, 3)]
SUMMARY = {"kind": "summary", "steps": 3, "final_loss": 0.66}


def test_a_completed_run_reads_its_summary(tmp_path: Path) -> None:
    run = read_run(make_run(tmp_path / "r", lines=[*TRAIN, {"kind": "eval"}, SUMMARY]))
    assert (run.status, run.completed, run.started) == ("completed", True, "2026-11-29T03:15:00Z")
    assert (run.steps, run.loss) == (3, 0.66)


def test_a_stopped_run_reads_its_newest_train_line(tmp_path: Path) -> None:
    lines = [*TRAIN, {"kind": "eval", "loss": 9.0}]
    run = read_run(make_run(tmp_path / "r", "interrupted", lines))
    assert (run.status, run.completed, run.steps, run.loss) == ("interrupted", False, 3, 2.0 / 3)


def test_a_line_cut_by_a_crash_is_passed_over(tmp_path: Path) -> None:
    path = make_run(tmp_path / "r", "running", TRAIN)
    with (path / "metrics.jsonl").open("a") as stream:
        stream.write('{"kind": "train", "step": 4, "lo')
    assert read_run(path).steps == 3


def test_only_the_end_of_a_long_metrics_file_is_read(tmp_path: Path) -> None:
    lines = [{"kind": "train", "step": step, "loss": 1.0} for step in range(1, 20001)]
    path = make_run(tmp_path / "r", "running", lines)
    assert (path / "metrics.jsonl").stat().st_size > 10 * records.METRICS_TAIL_BYTES
    assert read_run(path).steps == 20000


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"{not json", "manifest.json: not JSON (Expecting property name"),
        (b"[1, 2]", "manifest.json: not a JSON object"),
        (b"\xff\xfe", "manifest.json: not UTF-8 text"),
        (b"[" * 200_000 + b"]" * 200_000, "manifest.json: JSON nested more than 64 levels"),
    ],
)
def test_a_manifest_that_is_not_one_makes_the_run_unreadable(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = make_run(tmp_path / "r", None, TRAIN)
    (path / "manifest.json").write_bytes(content)
    run = read_run(path)
    assert (run.manifest, run.status) == (None, "unreadable")
    assert run.problem is not None
    assert run.problem.startswith(problem), run.problem


def test_metrics_lines_nested_too_deep_are_passed_over(tmp_path: Path) -> None:
    """A line nested deeper than any reader follows is skipped like any unreadable line: the
    train line before it gives the progress (no RecursionError)."""
    path = make_run(tmp_path / "r", None, TRAIN)
    with (path / "metrics.jsonl").open("ab") as stream:
        stream.write(b"[" * 30_000 + b"]" * 30_000 + b"\n")
    run = read_run(path)
    assert (run.steps, run.loss) == (3, TRAIN[-1]["loss"])


def test_a_manifest_too_large_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "MANIFEST_LIMIT", 100)
    path = make_run(tmp_path / "r")
    (path / "manifest.json").write_text(json.dumps({"status": "completed", "pad": "x" * 200}))
    run = read_run(path)
    assert (run.status, run.problem) == ("unreadable", "manifest.json: larger than 100 bytes")


def test_links_and_special_files_are_not_followed(tmp_path: Path) -> None:
    elsewhere = make_run(tmp_path / "elsewhere", "completed", [SUMMARY])
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "manifest.json").symlink_to(elsewhere / "manifest.json")
    (linked / "metrics.jsonl").symlink_to(elsewhere / "metrics.jsonl")
    run = read_run(linked)
    assert (run.status, run.steps) == ("unreadable", None)
    assert run.problem is not None
    assert run.problem.startswith("manifest.json: ")
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "manifest.json")  # opened without blocking, then refused
    assert read_run(fifo).problem == "manifest.json: not a regular file"


def test_the_runs_are_the_directories_that_hold_a_record(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_run(root / "b-2")
    make_run(root / "a-1", "failed", TRAIN)
    make_run(root / "c-3", None, TRAIN)  # metrics only: an unreadable run, still listed
    (root / "empty").mkdir()
    (root / "notes.txt").write_text("mine")
    (root / "latest").symlink_to("b-2")
    (root / "outside").symlink_to(make_run(tmp_path / "outside"))
    assert [(run.name, run.status) for run in list_runs(root)] == [
        ("a-1", "failed"), ("b-2", "completed"), ("c-3", "unreadable"),
    ]  # fmt: skip
    assert list_runs(tmp_path / "missing") == []


def test_a_runs_root_that_cannot_be_listed_is_a_named_error(tmp_path: Path) -> None:
    """Not an empty listing, and not a traceback: a root that is a loop of links."""
    from ddpimg.errors import DdpimgError

    root = tmp_path / "runs"
    root.symlink_to(root)
    with pytest.raises(DdpimgError, match=r"cannot list the runs in .*runs \(Too many levels"):
        list_runs(root)
