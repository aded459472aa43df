"""The integration session's file order, and how all-tests' two lanes share its files
(tests/integration/schedule.py)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from tests.integration.schedule import (
    CLAIMS_VARIABLE,
    FROM_THE_END_VARIABLE,
    LONGEST_FIRST,
    claim,
    first_job_id,
    from_the_end,
    longest_first,
    unclaimed,
)

pytest_plugins = ["pytester"]

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


def test_from_the_end_reverses_the_files_and_keeps_each_files_order() -> None:
    items = [("a", 1), ("a", 2), ("b", 1), ("c", 1), ("c", 2)]
    assert from_the_end(items, lambda item: Path(item[0])) == [
        ("c", 1), ("c", 2), ("b", 1), ("a", 1), ("a", 2),
    ]  # fmt: skip


def test_only_the_first_claim_of_a_file_wins_and_names_its_owner(tmp_path: Path) -> None:
    assert claim(tmp_path, "test_a.py", "lane 1") is None
    assert claim(tmp_path, "test_a.py", "lane 2") == "lane 1"
    assert claim(tmp_path, "test_b.py", "lane 2") is None
    assert unclaimed(tmp_path, ["test_a.py", "test_b.py", "test_c.py"]) == ["test_c.py"]


def _claim_in_a_process(claims: str, owner: str) -> str | None:
    return claim(Path(claims), "test_a.py", owner)


def test_processes_claiming_one_file_at_once_get_one_winner(tmp_path: Path) -> None:
    owners = [f"process {n}" for n in range(8)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.starmap(_claim_in_a_process, [(str(tmp_path), o) for o in owners])
    winners = [owner for owner, result in zip(owners, results, strict=True) if result is None]
    assert len(winners) == 1
    assert {result for result in results if result is not None} <= {winners[0], "the other lane"}


@pytest.mark.parametrize(("workers", "lanes"), [(1, 1), (2, 1), (2, 2), (3, 2)])
def test_every_worker_of_every_lane_gets_a_job_id_slice_of_its_own(
    workers: int, lanes: int
) -> None:
    starts = sorted(
        first_job_id(worker, workers, lane, lanes, 625)
        for worker in range(workers)
        for lane in range(lanes)
    )
    width = 625 // (workers * lanes)
    assert starts == [1 + n * width for n in range(workers * lanes)]
    assert starts[-1] + width - 1 <= 625


# Three files of one test each; the third's module fixture leaves a mark when it is made.
FILES = {
    "test_a.py": "def test_a() -> None:\n    pass\n",
    "test_b.py": "def test_b() -> None:\n    pass\n",
    "test_c.py": (
        "import pathlib\nimport pytest\n\n"
        "@pytest.fixture(scope='module', autouse=True)\n"
        "def made() -> None:\n    pathlib.Path('fixture-made').touch()\n\n"
        "def test_c() -> None:\n    pass\n"
    ),
}
CONFTEST = (
    "from tests.integration.conftest import pytest_collection_modifyitems, pytest_runtest_setup\n"
    "__all__ = ['pytest_collection_modifyitems', 'pytest_runtest_setup']\n"
)


def test_two_lanes_run_each_file_once_and_skip_a_taken_one_before_its_fixtures(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The integration conftest's hooks, as all-tests' lanes run them: the second lane, from
    the end, takes test_c.py first; the first lane then runs the rest and skips test_c.py
    without making its fixture; a third run finds everything taken."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(**{name.removesuffix(".py"): text for name, text in FILES.items()})
    claims = tmp_path / "claims"
    claims.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    # Not this session's pytest-xdist worker: the runs below are plain pytest (gw0 by default).
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    monkeypatch.setenv(CLAIMS_VARIABLE, str(claims))

    monkeypatch.setenv(FROM_THE_END_VARIABLE, "1")
    second = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", "-x", "test_c.py")
    second.assert_outcomes(passed=1)
    assert (pytester.path / "fixture-made").exists()
    (pytester.path / "fixture-made").unlink()

    monkeypatch.delenv(FROM_THE_END_VARIABLE)
    first = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    first.assert_outcomes(passed=2, skipped=1)
    first.stdout.fnmatch_lines(["SKIPPED * test_c.py: run by all-tests' second lane (gw0, pid *)"])
    assert not (pytester.path / "fixture-made").exists()

    again = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    again.assert_outcomes(skipped=3)
    assert unclaimed(claims, list(FILES)) == []
