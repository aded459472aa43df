"""Hooks that run once a module is imported, whoever imports it."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from ddpimg.script.imports import when_imported


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh package ``pkg_<id>`` with a module ``mod`` defining ``value = 1``."""
    name = f"pkg_{tmp_path.name.replace('-', '_')}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "mod.py").write_text("value = 1\n\n\ndef where():\n    return 'here'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for loaded in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[loaded]


def test_the_hook_runs_after_the_modules_code(package: str) -> None:
    seen: list[int] = []

    def hook(module: ModuleType) -> None:
        seen.append(module.value)
        module.value = 2

    when_imported(f"{package}.mod", hook)
    assert seen == []
    module = importlib.import_module(f"{package}.mod")
    assert seen == [1]
    assert module.value == 2
    importlib.reload(module)  # once: a reload is not a first import
    assert seen == [1]


def test_an_imported_module_gets_the_hook_at_once(package: str) -> None:
    module = importlib.import_module(f"{package}.mod")
    seen: list[ModuleType] = []
    when_imported(f"{package}.mod", seen.append)
    assert seen == [module]


def test_the_modules_source_stays_readable(package: str) -> None:
    when_imported(f"{package}.mod", lambda module: None)
    module = importlib.import_module(f"{package}.mod")
    assert "return 'here'" in inspect.getsource(module.where)


def test_a_failing_hook_is_reported_and_the_import_goes_on(
    package: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def hook(module: ModuleType) -> None:
        raise AttributeError("no Trainer here")

    when_imported(f"{package}.mod", hook)
    module = importlib.import_module(f"{package}.mod")
    assert module.value == 1
    assert capsys.readouterr().err == (
        f"ddpimg: warning: its integration with {package}.mod could not attach "
        "(AttributeError: no Trainer here); the run goes on without it\n"
    )
