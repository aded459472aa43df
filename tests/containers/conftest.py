"""The images under test for the Docker tests, named by environment variables:

- ``DDPIMG_TEST_IMAGE``: the image test_smoke.py, test_runtimes.py and
  test_documented_commands.py run (`nox -s smoke` builds ``ddpimg:cpu``);
- ``DDPIMG_FLAVOUR_IMAGES``: the images test_flavours.py compares with
  ``ddpimg.hardware.builds``, separated by spaces (`nox -s flavours` builds them).

Without its variable there is nothing for a module to test: its tests are deselected (pytest
reports how many), so `pytest tests/containers` runs the static recipe tests anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.containers.podman_hpc import Store
from tests.engines.availability import missing_reason

IMAGE_VARIABLE = "DDPIMG_TEST_IMAGE"
FLAVOUR_IMAGES_VARIABLE = "DDPIMG_FLAVOUR_IMAGES"
NEEDS = {
    Path(__file__).with_name("test_smoke.py"): IMAGE_VARIABLE,
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


@pytest.fixture(scope="session", autouse=True)
def podman_hpc_store(request: pytest.FixtureRequest) -> Iterator[Store | None]:
    """podman-hpc with the test image loading into its store, started with the session
    when a selected test needs it (the load takes minutes: the other tests run meanwhile);
    None when none does or podman is missing (the podman tests then skip or fail as the
    engine policy says)."""
    wanted = any(item.get_closest_marker("podman") for item in request.session.items)
    if not wanted or not os.environ.get(IMAGE_VARIABLE) or missing_reason("podman"):
        yield None
        return
    store = Store(os.environ[IMAGE_VARIABLE])
    try:
        yield store
    finally:
        store.close()
