"""`ddpimg site probe`'s arguments: a profile's file name, a positive timeout (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "draft.txt"], "--out draft.txt: a profile is NAME.toml"),
        (["--out", "my draft.toml"], "--out my draft.toml: a profile is NAME.toml"),
        (["--out", "draft.toml", "--timeout", "0"], "--timeout 0: must be positive"),
    ],
)
def test_bad_arguments_exit_2_naming_them(tmp_path: Path, args: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ddpimg", "site", "probe", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"ddpimg: error: {message}")
    assert list(tmp_path.iterdir()) == []


def test_an_existing_draft_is_kept_without_force(tmp_path: Path) -> None:
    """Checked before the probe's minutes: nothing is measured, the file is kept."""
    (tmp_path / "draft.toml").write_text("# my edits\n")
    proc = subprocess.run(
        [sys.executable, "-m", "ddpimg", "site", "probe", "--out", "draft.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"ddpimg: error: --out {tmp_path / 'draft.toml'}: a file is")
    assert (tmp_path / "draft.toml").read_text() == "# my edits\n"
    assert [path.name for path in tmp_path.iterdir()] == ["draft.toml"]
