"""containers/imagebuild works from the repository root, as nox sessions do."""

from __future__ import annotations

import pytest

from tests.containers.imagebuild.fakes import FakeSession
from tests.containers.recipes import ROOT


@pytest.fixture(autouse=True)
def _at_the_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


@pytest.fixture
def session() -> FakeSession:
    return FakeSession()
