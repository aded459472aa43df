"""``ddpimg runs``: the runs under the runs root, as a table or JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddpimg.cli import main
from tests.runs.test_records import SUMMARY, TRAIN, make_run


@pytest.fixture(autouse=True)
def nothing_submitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No runs submitted from here (ddpimg submit's state file), whatever this machine has."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DDPIMG_RUNS", raising=False)
    make_run(tmp_path / "runs" / "mnist-20261129-031500", "completed", [*TRAIN, SUMMARY])
    make_run(tmp_path / "runs" / "mnist-20261129-041500", "interrupted", TRAIN)
    (tmp_path / "runs" / "latest").symlink_to("mnist-20261129-041500")
    return Path("runs")


def test_the_table_says_status_steps_loss_and_directory(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "  run                    status       steps    loss  started               directory",
        "  mnist-20261129-031500  completed        3    0.66  2026-11-29T03:15:00Z  "
        "runs/mnist-20261129-031500",
        "* mnist-20261129-041500  interrupted      3  0.6667  2026-11-29T03:15:00Z  "
        "runs/mnist-20261129-041500",
    ]


def test_json_lines_for_scripts(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["name"], r["status"], r["steps"], r["latest"]) for r in rows] == [
        ("mnist-20261129-031500", "completed", 3, False),
        ("mnist-20261129-041500", "interrupted", 3, True),
    ]
    assert rows[0]["loss"] == 0.66
    assert rows[0]["directory"] == "runs/mnist-20261129-031500"


def test_another_root_and_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DDPIMG_RUNS", str(tmp_path / "scratch"))
    assert main(["runs"]) == 0
    assert capsys.readouterr().out == (
        f"no runs in {tmp_path}/scratch (train without --out starts one there)\n"
    )
    make_run(tmp_path / "elsewhere" / "gpt-7", "running", TRAIN)
    assert main(["runs", "--root", "elsewhere"]) == 0
    assert "gpt-7  running" in capsys.readouterr().out


def test_names_that_could_drive_a_terminal_are_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    make_run(tmp_path / "runs" / "x\x1b[2Jy", "completed", [SUMMARY])
    started = tmp_path / "runs" / "z-1"
    make_run(started, "completed", [SUMMARY])
    manifest = json.loads((started / "manifest.json").read_text())
    manifest["started_utc"] = "2026\x1b]0;owned\x07"  # a start time is the manifest's word too
    (started / "manifest.json").write_text(json.dumps(manifest))
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "x\\x1b[2Jy" in out
    assert "2026\\x1b]0;owned\\x07" in out


@pytest.mark.parametrize("flags", [[], ["--json"]])
def test_a_reader_that_went_away_ends_it_quietly(root: Path, flags: list[str]) -> None:
    """``ddpimg runs | head -1``: as any Unix filter, 128 + SIGPIPE and nothing on stderr (it
    used to report a crash with a traceback file)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ddpimg", "runs", *flags],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")


def test_a_reader_still_there_gets_every_line(root: Path) -> None:
    """The same command into a pipe that is read: every row, exit 0 (what tells the two
    apart is the pipe, not the error)."""
    done = subprocess.run(
        [sys.executable, "-m", "ddpimg", "runs", "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0
    assert len(done.stdout.splitlines()) == 2
