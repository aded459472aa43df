"""The images under test for the Docker tests, named by environment variables:

- ``DDPIMG_TEST_IMAGE``: the image test_smoke.py, test_reproducible.py, test_runtimes.py and
  test_documented_commands.py run (`nox -s smoke` builds ``ddpimg:cpu``);
- ``DDPIMG_FLAVOUR_IMAGES``: the images test_flavours.py compares with
  ``ddpimg.hardware.builds``, separated by spaces (`nox -s flavours` builds them).

Without its variable there is nothing for a module to test: its tests are deselected (pytest
reports how many), so `pytest tests/containers` runs the static recipe tests anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

IMAGE_VARIABLE = "DDPIMG_TEST_IMAGE"
FLAVOUR_IMAGES_VARIABLE = "DDPIMG_FLAVOUR_IMAGES"
NEEDS = {
    Path(__file__).with_name("test_smoke.py"): IMAGE_VARIABLE,
    Path(__file__).with_name("test_reproducible.py"): IMAGE_VARIABLE,
    Path(__file__).with_name("test_runtimes.py"): IMAGE_VARIABLE,
    Path(__file__).with_name("test_documented_commands.py"): IMAGE_VARIABLE,
    Path(__file__).with_name("test_flavours.py"): FLAVOUR_IMAGES_VARIABLE,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unset = {path for path, variable in NEEDS.items() if not os.environ.get(variable)}
    deselected = [item for item in items if item.path in unset]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.path not in unset]


@pytest.fixture(scope="session")
def image() -> str:
    return os.environ[IMAGE_VARIABLE]


@pytest.fixture(scope="session")
def flavour_images() -> list[str]:
    return os.environ[FLAVOUR_IMAGES_VARIABLE].split()
