"""Files, and regions of files, that the code generates and the repository keeps: a test
compares them with what the code produces now, and ``DDPIMG_UPDATE_GOLDEN=1`` rewrites them.

    DDPIMG_UPDATE_GOLDEN=1 python -m pytest tests/jobs tests/site -q

then read the diff: it is exactly what users will see change.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

UPDATE_VAR = "DDPIMG_UPDATE_GOLDEN"


def updating() -> bool:
    return os.environ.get(UPDATE_VAR, "") not in ("", "0")


def _differs(path: Path, actual: str, expected: str) -> AssertionError:
    diff = difflib.unified_diff(
        actual.splitlines(), expected.splitlines(), str(path), "generated now", lineterm=""
    )
    return AssertionError(
        f"{path} differs from what the code generates now; if the change is intended, "
        f"regenerate with {UPDATE_VAR}=1 python -m pytest tests/jobs tests/site and review the "
        "diff:\n" + "\n".join(list(diff)[:60])
    )


def check_or_update(path: Path, expected: str) -> None:
    """Compare ``path`` with ``expected``; with DDPIMG_UPDATE_GOLDEN=1 rewrite it instead."""
    if updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(expected, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing; create it with {UPDATE_VAR}=1 pytest tests/jobs"
    actual = path.read_text(encoding="utf-8")
    if actual != expected:
        raise _differs(path, actual, expected)


def check_or_update_region(path: Path, name: str, expected: str) -> None:
    """The lines between ``<!-- NAME -->`` and ``<!-- /NAME -->`` in ``path`` must be
    ``expected``; with DDPIMG_UPDATE_GOLDEN=1 they are rewritten instead."""
    begin, end = f"<!-- {name} -->\n", f"<!-- /{name} -->"
    text = path.read_text(encoding="utf-8")
    assert text.count(begin) == 1, f"{path}: no single {begin.strip()}"
    assert text.count(end) == 1, f"{path}: no single {end}"
    head, rest = text.split(begin)
    actual, tail = rest.split(end)
    if actual == expected:
        return
    if updating():
        path.write_text(head + begin + expected + end + tail, encoding="utf-8")
        return
    raise _differs(path, actual, expected)
