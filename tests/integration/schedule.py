"""The order in which the integration session's two pytest-xdist workers take the test files.

``--dist loadfile`` gives a worker a whole file at a time (its module fixtures made once).
By default pytest-xdist hands out the files with the most tests first, so the few long
files (three script cells of 1.5-3 minutes each in one file) came last: one worker was
still in one of them minutes after the other ran out of work (CI's CPU record, 2026-11-26:
15-33% idle over the session's last 5 minutes). The files below go first, longest first
(the longest-processing-time rule); the rest follow in collection order. This only orders
the work: no test's verdict depends on it. Measured on two runs of the test command (the same
machine): the last 5 minutes' idle CPU fell to 8%, the session's time stayed 1,893-1,896 s,
so the gain is within the noise of a 31-minute session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

# Each file's summed test time on one worker, estimated from the test command's --durations
# lists and test counts (2026-11-26, 2-core AMD EPYC): what to start first. A file missing
# here only loses its head start.
LONGEST_FIRST = (
    "test_scripts.py",  # ~510 s: three script cells, their references, the trackers
    "test_tutorial_launchers.py",  # ~320 s: ten launch lines, three under DeepSpeed's launcher
    "test_preemption.py",  # ~300 s
    "test_image_data.py",  # ~300 s
    "test_trainers.py",  # ~250 s
    "test_trackers.py",  # ~240 s
    "test_lightning.py",  # ~210 s
    "test_sbatch.py",  # ~200 s
    "test_transformers.py",  # ~180 s
    "test_token_shards.py",  # ~150 s
    "test_crafted_checkpoints.py",  # ~150 s
    "test_launchers.py",  # ~140 s
    "test_resume_world_size.py",  # ~115 s
    "test_chaos.py",  # ~105 s
    "test_tracker_sync.py",  # ~80 s
    "test_stalls.py",  # ~80 s
)

Item = TypeVar("Item")


def longest_first(items: Sequence[Item], path_of: Callable[[Item], Path]) -> list[Item]:
    """``items`` with those of the files in LONGEST_FIRST first, in its order; a file's own
    items and the other files keep their order (a stable sort)."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    return sorted(items, key=lambda item: rank.get(path_of(item).name, len(LONGEST_FIRST)))
