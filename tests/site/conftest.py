"""Helpers for the site tests: profiles written into tmp_path."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

WriteProfile = Callable[..., Path]


@pytest.fixture
def write_profile(tmp_path: Path) -> WriteProfile:
    """Write ``NAME.toml`` (into ``tmp_path`` or ``directory``) and return its path. Without
    ``body`` the file is a minimal valid profile named NAME."""

    def write(name: str, body: str | None = None, directory: Path | None = None) -> Path:
        folder = directory if directory is not None else tmp_path
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.toml"
        text = f'[site]\nname = "{name}"\n' if body is None else textwrap.dedent(body)
        path.write_text(text, encoding="utf-8")
        return path

    return write
