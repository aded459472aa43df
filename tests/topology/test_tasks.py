"""Slurm tasks-per-node strings: counts, repeats, and malformed values."""

from __future__ import annotations

import pytest

from ddpimg.errors import HostlistError
from ddpimg.topology.tasks import parse_tasks_per_node


@pytest.mark.parametrize(
    ("value", "counts"),
    [
        ("2", [2]),
        ("1", [1]),
        ("4(x2)", [4, 4]),
        ("4(x2),2", [4, 4, 2]),
        ("2(x3),1", [2, 2, 2, 1]),
        ("3,2", [3, 2]),
        ("1,4(x2),1(x1)", [1, 4, 4, 1]),
        ("128(x32)", [128] * 32),
        (" 2(x2)\n", [2, 2]),
    ],
)
def test_parses_counts_and_repeats_in_node_order(value: str, counts: list[int]) -> None:
    assert parse_tasks_per_node(value) == counts


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", r"SLURM_TASKS_PER_NODE='': the value is empty"),
        ("   ", r"SLURM_TASKS_PER_NODE='   ': the value is empty"),
        ("2,", r"entry '' is not a count N or a repeated count N\(xM\)"),
        ("2,,2", r"entry '' is not a count N or a repeated count N\(xM\)"),
        ("two", r"entry 'two' is not a count"),
        ("2(x)", r"entry '2\(x\)' is not a count"),
        ("2(3)", r"entry '2\(3\)' is not a count"),
        ("2x3", r"entry '2x3' is not a count"),
        ("-1", r"entry '-1' is not a count"),
        ("2(x2", r"entry '2\(x2' is not a count"),
        ("0", r"entry '0' has a zero count"),
        ("2(x0)", r"entry '2\(x0\)' has a zero count"),
    ],
)
def test_malformed_values_name_variable_and_entry(value: str, message: str) -> None:
    with pytest.raises(HostlistError, match=message) as caught:
        parse_tasks_per_node(value)
    assert caught.value.hint is not None
    assert "4(x2),2" in caught.value.hint


def test_error_names_the_variable_it_was_given() -> None:
    with pytest.raises(HostlistError, match=r"^SLURM_STEP_TASKS_PER_NODE='x': "):
        parse_tasks_per_node("x", "SLURM_STEP_TASKS_PER_NODE")


def test_a_huge_repeat_is_refused_before_the_list_is_built() -> None:
    """2(x100000000) once took 1.6 GB before it was refused: the bound is checked first, so
    refusing it allocates almost nothing (measured by tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(HostlistError, match=r"makes more than 1,048,576 nodes"):
            parse_tasks_per_node("2(x100000000)")
        with pytest.raises(HostlistError, match=r"is not a count"):
            parse_tasks_per_node("9" * 5000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
