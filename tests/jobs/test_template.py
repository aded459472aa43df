"""ddpimg.jobs.template: the job scripts' fixed parts are shell files, filled in line by line."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from ddpimg.jobs.template import fill_template

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = "a=@A@\n@LINES@\nend @A@\n"


def test_a_placeholder_line_becomes_the_lines_given() -> None:
    filled = fill_template(TEMPLATE, {"A": "1"}, {"LINES": ["x", "y"]})
    assert filled == ["a=1", "x", "y", "end 1"]


def test_an_empty_part_leaves_no_blank_line() -> None:
    assert fill_template(TEMPLATE, {"A": "1"}, {"LINES": []}) == ["a=1", "end 1"]


def test_a_placeholder_without_a_value_is_an_error() -> None:
    with pytest.raises(KeyError, match="@A@ has no value"):
        fill_template(TEMPLATE, {}, {"LINES": []})


def test_a_value_the_template_does_not_use_is_an_error() -> None:
    with pytest.raises(KeyError, match="no placeholder for B"):
        fill_template(TEMPLATE, {"A": "1", "B": "2"}, {"LINES": []})


def test_the_wheel_carries_every_file_of_the_package(tmp_path: Path) -> None:
    """The templates are read at run time: an image or a venv installed from the wheel must
    have them (pyproject.toml's package-data), as it has every module."""
    # Built from a copy: setuptools builds in the tree, and a stale build/ there would
    # bring its files into the wheel whatever package-data says.
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("src", "site-profiles"):
        shutil.copytree(REPO / name, tree / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, tree / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path / "dist"), str(tree)],
        check=True, timeout=300,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("ddpimg-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packed = {name for name in archive.namelist() if name.startswith("ddpimg/")}
    source = REPO / "src"
    files = {
        path.relative_to(source).as_posix()
        for path in (source / "ddpimg").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert "ddpimg/jobs/templates/job-body.sh" in files
    assert sorted(files - packed) == []


@pytest.mark.shellcheck
def test_the_templates_are_shellcheck_clean_as_they_are() -> None:
    """The templates, before any filling, with every finding on: what the renderer adds is
    checked in the golden scripts (test_golden.py)."""
    folder = resources.files("ddpimg.jobs") / "templates"
    paths = sorted(str(item) for item in folder.iterdir() if item.name.endswith(".sh"))
    assert paths
    check = subprocess.run(
        ["shellcheck", "--shell=bash", "--severity=style", "--format=gcc", *paths],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
