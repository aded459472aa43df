"""The integration session's file order (tests/integration/schedule.py)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.schedule import LONGEST_FIRST, longest_first

INTEGRATION = Path(__file__).parent / "integration"


def test_every_listed_file_exists_once() -> None:
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    missing = [name for name in LONGEST_FIRST if not (INTEGRATION / name).is_file()]
    assert not missing, f"tests/integration/schedule.py lists files that are gone: {missing}"


def test_listed_files_come_first_in_their_order_and_the_rest_keep_theirs() -> None:
    first, second = LONGEST_FIRST[0], LONGEST_FIRST[1]
    items = [
        ("test_a.py", 1), (second, 1), ("test_b.py", 1), (first, 1), (second, 2),
        ("test_a.py", 2), (first, 2),
    ]  # fmt: skip
    ordered = longest_first(items, lambda item: Path("tests/integration") / item[0])
    assert ordered == [
        (first, 1), (first, 2), (second, 1), (second, 2),
        ("test_a.py", 1), ("test_b.py", 1), ("test_a.py", 2),
    ]  # fmt: skip
