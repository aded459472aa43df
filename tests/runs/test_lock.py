"""The lock by which a live run's directory is told from one whose process is gone."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpimg.runs import lock


@pytest.fixture(autouse=True)
def taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    held: list[int] = []
    monkeypatch.setattr(lock, "_held", held)
    yield held
    for descriptor in held:
        os.close(descriptor)


def test_one_holder_at_a_time_until_it_ends(tmp_path: Path, taken: list[int]) -> None:
    assert lock.hold(tmp_path)
    assert not lock.hold(tmp_path)  # another open file: another process, as flock sees it
    os.close(taken.pop())  # the holder ends
    assert lock.hold(tmp_path)


def test_a_lock_file_that_is_a_link_is_not_taken(tmp_path: Path) -> None:
    (tmp_path / lock.LOCK_NAME).symlink_to(tmp_path / "elsewhere")
    assert not lock.hold(tmp_path)
    assert not (tmp_path / "elsewhere").exists()


def test_a_file_system_without_locks_holds_nothing_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(descriptor: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(lock.fcntl, "flock", unsupported)
    assert lock.hold(tmp_path)
