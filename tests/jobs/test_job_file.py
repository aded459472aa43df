"""The TOML job file: a round trip through resolution, and errors naming the file and key."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from ddpimg.jobs import JobError, load_job_file, resolve_job
from tests.hangguard import hang_guard
from tests.jobs.conftest import shipped


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_job_file_round_trip(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        site = "della"
        nodes = 2
        time = "04:00:00"
        binds = ["/data"]
        command = ["train", "mnist", "--epochs", "3"]
        """,
    )
    loaded = load_job_file(path)
    assert loaded.site == "della"
    spec = resolve_job(shipped("della"), {}, loaded, site=loaded.site)
    assert (spec.nodes, spec.time, spec.binds, spec.source("nodes")) == (
        2,
        "04:00:00",
        ("/scratch/gpfs", "/data"),
        str(path),
    )
    assert spec.command == ("train", "mnist", "--epochs", "3")


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        ("node = 2\n", r"unknown key 'node'\n", "did you mean 'nodes'?"),
        ("[job]\nnodes = 2\n", r"unknown key 'job' \(job files have no sections\)", "known keys"),
        ("nodes = true\n", r"key 'nodes' must be an integer, found True \(bool\)", "nodes = 4"),
        ("nodes = 2.0\n", r"key 'nodes' must be an integer, found 2\.0 \(float\)", "nodes = 4"),
        ("binds = [1]\n", r"key 'binds' must be a list of strings", 'binds = ["a", "b"]'),
        ("site = 3\n", r"key 'site' must be a string, found 3 \(int\)", 'site = "text"'),
        ("nodes = \n", r"not valid TOML", "fix the TOML syntax"),
    ],
)
def test_job_file_errors(tmp_path: Path, text: str, message: str, hint: str) -> None:
    with pytest.raises(JobError, match=message) as caught:
        load_job_file(write(tmp_path, text))
    assert str(tmp_path / "job.toml") in caught.value.message
    assert hint in str(caught.value.hint)


def test_job_file_missing(tmp_path: Path) -> None:
    with pytest.raises(JobError, match=r"cannot read job file .*nope\.toml: No such file"):
        load_job_file(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("fifo", r"cannot read job file .*job.toml: it is a FIFO \(named pipe\), not a regular"),
        ("/dev/zero", r"cannot read job file /dev/zero: it is a character device"),
        ("big", r"job.toml: it is 2,097,154 bytes, more than the 1 MiB such a file may have"),
        ("deep", r"job.toml: arrays or tables nested too deeply to read"),
    ],
)
def test_a_job_file_is_read_within_bounds(tmp_path: Path, path: str, message: str) -> None:
    """--config FIFO waited forever and --config /dev/zero read until memory ran out."""
    target = tmp_path / "job.toml"
    if path == "fifo":
        os.mkfifo(target)
    elif path == "big":
        target.write_text("# " + "x" * (2 << 20))
    elif path == "deep":
        target.write_text("a = " + "[" * 100_000)
    else:
        target = Path(path)
    with hang_guard("reading a job file", 60), pytest.raises(JobError, match=message):
        load_job_file(target)
