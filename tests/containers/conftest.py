"""The image under test for the Docker smoke tests (test_smoke.py).

``DDPIMG_TEST_IMAGE`` names it; `nox -s smoke` builds ``ddpimg:cpu`` and sets it. Without it
there is nothing to smoke-test: the smoke tests are deselected (pytest reports how many), so
`pytest tests/containers` runs the static recipe tests anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

IMAGE_VARIABLE = "DDPIMG_TEST_IMAGE"
SMOKE_PATH = Path(__file__).with_name("test_smoke.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(IMAGE_VARIABLE):
        return
    smoke = [item for item in items if item.path == SMOKE_PATH]
    if smoke:
        config.hook.pytest_deselected(items=smoke)
        items[:] = [item for item in items if item.path != SMOKE_PATH]


@pytest.fixture(scope="session")
def image() -> str:
    return os.environ[IMAGE_VARIABLE]
