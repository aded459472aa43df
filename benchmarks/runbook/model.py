"""What the runbook is made of: a step of the plan, what a step found, and what the steps
share while a part runs (the clock every step runs against is ``runbook.deadline``)."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from runbook.commands import RunLog
from runbook.deadline import Deadline

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
    # The batch a flag gave the benchmark of a model (resnet, gpt): no search on the GPU.
    batches: dict[str, int | None] = field(default_factory=dict)

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
