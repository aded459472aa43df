"""What every fuzz test of a reader shares (tests/data/test_fuzzed_readers.py,
tests/test_fuzzed_inputs.py): Hypothesis settings, derandomised (the same examples on every
machine, so CI never draws a new failure of its own), and the bound each example runs in.

``within_bounds``: the block must end within ``HANG_GUARD_S`` (a hang guard: examples take
milliseconds) and allocate at most ``MEMORY_BOUND`` at its peak, measured by tracemalloc
(Python's and NumPy's allocations; inputs are a few KiB, so a reader that sizes a buffer or
a list from a number it read shows here by orders of magnitude).
"""

from __future__ import annotations

import contextlib
import tracemalloc
from collections.abc import Iterator

from hypothesis import HealthCheck, settings

from tests.hangguard import hang_guard

HANG_GUARD_S = 10.0
MEMORY_BOUND = 64 << 20


def fuzz_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,  # timing is the hang guard's business, not a verdict
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


FUZZ = fuzz_settings(150)


@contextlib.contextmanager
def within_bounds(what: str) -> Iterator[None]:
    tracemalloc.start()
    try:
        with hang_guard(what, HANG_GUARD_S):
            yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BOUND, f"{what} allocated {peak:,} bytes at its peak"
