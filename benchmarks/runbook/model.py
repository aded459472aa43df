"""What the runbook is made of: a step of the plan, what a step found, the clock every step
runs against, and what the steps share while a part runs."""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from runbook.commands import RunLog

# pass: it works (or, for a measurement, meets its goal); miss: measured, below its goal;
# fail: broken; skip: not run here (no GPU, the budget, not in the dry run's sample).
Status = Literal["pass", "miss", "fail", "skip"]
STATUSES: tuple[Status, ...] = ("pass", "miss", "fail", "skip")


@dataclass(frozen=True)
class Row:
    """One line of the table: a step, or one cell of a matrix step."""

    name: str
    goal: str
    measured: str
    status: Status
    detail: str = ""  # why it failed or was skipped (bounded output tails)


@dataclass
class Outcome:
    """What a step found: its own row's figures, the raw record for the JSON, and the rows of
    its parts (a matrix step's cells), each with its own status."""

    status: Status
    measured: str
    detail: str = ""
    record: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)


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


@dataclass
class Context:
    """What every step of a part sees. ``facts`` holds what earlier steps learned for later
    ones (the device's name, which backend two ranks on one GPU use)."""

    dry_run: bool
    repo: Path
    out: Path
    work: Path
    wheels: Path
    deadline: Deadline
    log: RunLog
    jobs: int
    only: tuple[str, ...] = ()
    full_matrix: bool = False
    facts: dict[str, Any] = field(default_factory=dict)

    def selected(self, name: str) -> bool:
        """Whether ``--only`` lets ``name`` (a step, or a cell as ``step/trainer/...``) run: a
        pattern matching it or one of its leading parts (``matrix`` selects every cell of
        the matrix), or naming something inside it (``matrix/gpt/*`` selects the step)."""
        if not self.only:
            return True
        parts = name.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        return any(
            pattern.startswith(name + "/") or any(fnmatch.fnmatchcase(p, pattern) for p in prefixes)
            for pattern in self.only
        )


@dataclass(frozen=True)
class Step:
    """One entry of the plan: a name, the parts (commands) it runs in, its goal in words, how
    long it is expected to take on the GPU and in the dry run, and the function that runs it.
    ``always``: run whatever ``--only`` says (what the other steps stand on)."""

    name: str
    parts: tuple[int, ...]
    goal: str
    run: Callable[[Context], Outcome]
    estimate_s: float
    dry_estimate_s: float
    always: bool = False

    def estimate(self, dry_run: bool) -> float:
        return self.dry_estimate_s if dry_run else self.estimate_s
