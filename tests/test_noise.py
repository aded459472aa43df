"""tests/noise.py: the measured tolerances every trajectory comparison uses."""

from __future__ import annotations

import math

import pytest

from tests.noise import FLOAT32_STEP, Tolerance, assert_within, floor_of, relative_differences


def test_relative_differences_step_by_step() -> None:
    assert relative_differences([1.0, 2.2, 4.0], [1.0, 2.0, 5.0]) == pytest.approx([0, 0.1, 0.2])
    assert relative_differences([math.nan, 1.0], [math.nan, math.inf]) == [math.inf, math.inf]
    assert relative_differences([math.inf], [math.inf]) == [0.0]


def test_a_tolerance_is_a_multiple_of_a_floor_over_steps() -> None:
    tolerance = Tolerance(floor=2e-7, multiple=50, steps=3)
    assert tolerance.rel == pytest.approx(1e-5)
    with pytest.raises(ValueError, match="not a measured tolerance"):
        Tolerance(floor=0.0, multiple=10, steps=3)
    with pytest.raises(ValueError, match="not a measured tolerance"):
        Tolerance(floor=1e-7, multiple=0.5, steps=3)


def test_assert_within_compares_only_the_measured_steps() -> None:
    tolerance = Tolerance(floor=FLOAT32_STEP, multiple=10, steps=2)
    # Step 3 lies past the steps whose growth was measured: not compared.
    assert_within([1.0, 2.0, 9.0], [1.0, 2.000001, 3.0], tolerance, "run")
    with pytest.raises(AssertionError, match=r"run: 3 steps vs 2"):
        assert_within([1.0, 2.0, 3.0], [1.0, 2.0], tolerance, "run")


def test_assert_within_names_the_step_the_figures_and_the_floor() -> None:
    tolerance = Tolerance(floor=1e-7, multiple=10, steps=3)
    with pytest.raises(AssertionError) as failed:
        assert_within([1.0, 2.0, 3.003], [1.0, 2.0, 3.0], tolerance, "2 ranks vs 1")
    assert str(failed.value).startswith(
        "2 ranks vs 1: step 3: 3.003 vs 3.0: relative difference 1.0e-03 > 1.0e-06 "
        "(10 x this configuration's noise floor 1.0e-07, steps 1-3; see tests/noise.py)"
    )


def test_the_floor_is_the_most_the_reordering_variants_part_at_steps_1_and_2() -> None:
    differences = {
        "1 thread": [0.0, 3e-7, 9.0],  # step 3 is growth, not the floor
        "aten default": [2e-7, 1e-7],
        "2 ranks": [1e-3, 1e-3],  # the comparison under test: not a floor
    }
    assert floor_of(differences) == 3e-7
    assert floor_of({"1 thread": [0.0, 0.0]}) == FLOAT32_STEP
