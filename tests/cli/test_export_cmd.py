"""``ddpimg export RUN DST``: a destination that is there already, a symbolic link (one
left dangling too), is refused in one line with exit status 2 before anything is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpimg import cli, exitcodes


@pytest.mark.parametrize("kind", ["dangling link", "link to a folder", "folder", "file"])
def test_a_destination_already_there_is_a_one_line_refusal(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 54: a dangling link was NotADirectoryError from the final rename, exit 1."""
    run = tmp_path / "run"
    run.mkdir()  # no checkpoint at all: the destination is looked at first
    target = tmp_path / "out"
    if kind == "dangling link":
        target.symlink_to(tmp_path / "gone")
    elif kind == "link to a folder":
        (tmp_path / "elsewhere").mkdir()
        target.symlink_to(tmp_path / "elsewhere")
    elif kind == "folder":
        target.mkdir()
    else:
        target.write_text("x")
    status = cli.main(["export", str(run), str(target)])
    err = capsys.readouterr().err
    assert status == exitcodes.USAGE
    lines = err.splitlines()
    assert len(lines) == 2, err  # the error and its hint
    link = "is a symbolic link (to " if "link" in kind else "exists already"
    assert lines[0].startswith(f"ddpimg: error: {target} {link}")
    assert lines[1].startswith("  hint: export into a new directory")
    assert not list(tmp_path.glob(".out.*"))  # no staging folder left
