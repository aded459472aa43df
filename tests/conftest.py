"""Engine markers: skip (or, in CI, fail) tests whose engine this machine lacks.

The checks and the policy live in ``tests/engines/availability.py``. Set
``DDPIMG_REQUIRE_ENGINES=1`` to make a missing engine a test failure (``.ci/run`` does);
``gpu`` tests always skip without a GPU.

A test that fails because a command ran past its ``timeout`` says that it was killed by its
hang guard (tests/hangguard.py). DeepSpeed's ops are compiled into one directory per
interpreter for every session (tests/engines/opcache.py).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Generator

import pytest

from tests.engines import opcache
from tests.engines.availability import missing_reason, require_engines, verdict
from tests.hangguard import hang_guard_message

_REQUIRE = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault(opcache.VARIABLE, str(opcache.op_cache()))
    try:
        config.stash[_REQUIRE] = require_engines(os.environ)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc


def pytest_runtest_setup(item: pytest.Item) -> None:
    markers = [mark.name for mark in item.iter_markers()]
    decision = verdict(markers, missing_reason, item.config.stash[_REQUIRE])
    if decision.action == "skip":
        pytest.skip(decision.reason)
    if decision.action == "fail":
        pytest.fail(decision.reason, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and call.excinfo is not None:
        expired = call.excinfo.value
        if isinstance(expired, subprocess.TimeoutExpired):
            report.longrepr = f"{hang_guard_message(expired)}\n\n{report.longrepr}"
    return report
