"""``runs/latest`` and the way from what a user types (a directory, a run's name, latest) to
a run directory."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from ddpimg.errors import DdpimgError
from ddpimg.runs.latest import point_latest, resolve_run


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("mnist-1", "mnist-2"):
        (tmp_path / "runs" / name).mkdir(parents=True)
    return Path("runs")


def test_latest_is_replaced_by_a_relative_link(root: Path) -> None:
    assert point_latest(root, root / "mnist-1")
    assert point_latest(root, root / "mnist-2")
    assert os.readlink(root / "latest") == "mnist-2"
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("latest", "runs/mnist-2"),
        ("mnist-1", "runs/mnist-1"),
        ("runs/mnist-1", "runs/mnist-1"),
        ("elsewhere/run", "elsewhere/run"),  # a path as given: the command says what is wrong
    ],
)
def test_a_name_or_latest_stands_for_a_run_under_the_runs_root(
    root: Path, text: str, found: str
) -> None:
    point_latest(root, root / "mnist-2")
    assert resolve_run(text, {}) == Path(found)


def test_an_existing_path_wins_over_a_run_name(root: Path) -> None:
    Path("mnist-1").mkdir()
    assert resolve_run("mnist-1", {}) == Path("mnist-1")


def test_the_runs_root_comes_from_ddpimg_runs(root: Path, tmp_path: Path) -> None:
    (tmp_path / "other" / "gpt-7").mkdir(parents=True)
    assert (
        resolve_run("gpt-7", {"DDPIMG_RUNS": str(tmp_path / "other")})
        == tmp_path / "other" / "gpt-7"
    )


@pytest.mark.parametrize(
    ("setup", "text", "message"),
    [
        (None, "mnist-9", r"mnist-9: no such run directory, and no run of that name in runs/\n"),
        (None, "latest", r"latest: runs has no latest \(no run without --out has started"),
        ("../outside", "latest", r"latest: runs/latest points at '../outside', not at a run"),
        ("gone", "latest", r"latest: runs/latest points at 'gone', not at a run directory"),
        ("dir", "latest", r"latest: runs/latest is not a link to a run \(Invalid argument\)"),
    ],
)
def test_a_name_that_names_no_run_is_an_error(
    root: Path, setup: str | None, text: str, message: str
) -> None:
    if setup == "dir":
        (root / "latest").mkdir()
    elif setup is not None:
        (root / "latest").symlink_to(setup)
    with pytest.raises(DdpimgError, match=message) as err:
        resolve_run(text, {})
    assert err.value.hint is not None
    assert "ddpimg runs lists the runs in runs/" in err.value.hint


def test_a_latest_that_cannot_be_replaced_is_a_warning(root: Path) -> None:
    (root / "latest").write_text("mine")
    said = io.StringIO()
    assert not point_latest(root, root / "mnist-1", said)
    assert (root / "latest").read_text() == "mine"
    assert said.getvalue().startswith("ddpimg: warning: runs/latest left as it is")
