"""The clock every step of a part runs against: its budget, and the limit of each command."""

from __future__ import annotations

import time
from collections.abc import Callable


class Deadline:
    """The part's time budget. Steps ask whether their estimate fits before they start, and
    every command they run is killed when the budget is spent, so a part never outlives its
    command's limit on the device machine. ``reserve_s`` is kept back for the reports.

    ``hang_guard_s``, when given, replaces every command's own limit (the dry run's: its
    commands' limits are sized for a GPU, and on a CPU they may only catch hangs)."""

    def __init__(
        self,
        budget_s: float,
        reserve_s: float,
        clock: Callable[[], float] = time.monotonic,
        hang_guard_s: float | None = None,
    ) -> None:
        self.clock = clock
        self.started = clock()
        self.budget_s = budget_s
        self.ends = self.started + budget_s - reserve_s
        self.hang_guard_s = hang_guard_s

    def remaining(self) -> float:
        return self.ends - self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.started

    def command_limit(self, limit_s: float | None) -> tuple[float, str]:
        """How long a command whose own limit is ``limit_s`` may run from now, and what
        kills it then (for its verdict): the part's budget, or its hang guard."""
        guard = self.hang_guard_s if self.hang_guard_s is not None else limit_s
        left = self.remaining()
        if guard is not None and guard < left:
            return guard, f"its hang guard of {guard:.0f} s"
        return max(left, 0.1), "the part's budget"

    def refusal(self, estimate_s: float) -> str | None:
        """Why something estimated to take ``estimate_s`` must not start now; None if it fits."""
        left = self.remaining()
        if estimate_s <= left:
            return None
        return f"budget: needs about {estimate_s:.0f} s, {max(left, 0.0):.0f} s left"
