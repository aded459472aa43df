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

Under the test command (`nox -s all-tests`) the files are also shared between its two lanes.
The first lane runs them in the order above; the second, once its smoke and multi-node tests
are done, runs them from the other end (``from_the_end``); each file is run by the lane that
reaches it first (``claim``), so the lanes end together whichever is slower on the machine.
Why: beside a neighbour that kept both cores busy the first lane, CPU-bound, ended 390 s
after the second (docs/development.md), and for those 390 s only its two workers competed
with the neighbour's two (now 39 s apart). Idle, the second lane takes one file or none.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

# Set by all-tests for both lanes: the directory in which a lane claims a file by creating
# an entry of that name (only one creator succeeds: O_EXCL).
CLAIMS_VARIABLE = "DDPIMG_INTEGRATION_CLAIMS"
# Set by the second lane's session (integration-from-the-end).
FROM_THE_END_VARIABLE = "DDPIMG_INTEGRATION_FROM_THE_END"

# Each file's summed test time on one worker, estimated from the test command's --durations
# lists and test counts (2026-11-26/27, 2-core AMD EPYC): what to start first. A file missing
# here only loses its head start.
LONGEST_FIRST = (
    "test_scripts.py",  # ~510 s: three script cells, their references, the trackers
    "test_preemption.py",  # ~250 s
    "test_trackers.py",  # ~240 s
    "test_tutorial_launchers.py",  # ~230 s: eight launch lines, one under DeepSpeed's launcher
    "test_image_data.py",  # ~220 s
    "test_trainers.py",  # ~220 s
    "test_lightning.py",  # ~180 s: three launchers in one directory (~95 s), a requeued job
    "test_chaos.py",  # ~165 s: the random faults (~105 s) and five cells of the fault matrix
    "test_any_shape.py",  # ~150 s: three gloo phases of 11 cells and the exact DeepSpeed states
    "test_transformers.py",  # ~150 s: with the DeepSpeed checkpoint resumed on 1 rank (~40 s)
    "test_launchers.py",  # ~140 s
    "test_sbatch.py",  # ~165 s: a requeued job waits for no scheduling pass; a sweep's array ~35 s
    "test_token_shards.py",  # ~125 s
    "test_crafted_checkpoints.py",  # ~110 s
    "test_tracker_sync.py",  # ~80 s
    "test_compile.py",  # ~80 s: two gloo groups, inductor's toy compile ~17 s of it
    "test_stalls.py",  # ~80 s
    "test_run_directories.py",  # ~65 s: three short runs, four refusals at start-up
)

Item = TypeVar("Item")


def longest_first(items: Sequence[Item], path_of: Callable[[Item], Path]) -> list[Item]:
    """``items`` with those of the files in LONGEST_FIRST first, in its order; a file's own
    items and the other files keep their order (a stable sort)."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    return sorted(items, key=lambda item: rank.get(path_of(item).name, len(LONGEST_FIRST)))


def from_the_end(items: Sequence[Item], path_of: Callable[[Item], Path]) -> list[Item]:
    """``items`` with their files in the reverse order, each file's own items in theirs (a
    file's tests may rely on its module fixtures' order)."""
    files: dict[Path, list[Item]] = {}
    for item in items:
        files.setdefault(path_of(item), []).append(item)
    return [item for group in reversed(files.values()) for item in group]


def claim(claims: Path, name: str, owner: str) -> str | None:
    """Claim the test file ``name`` for ``owner``: None when it is now ``owner``'s to run,
    else who claimed it first."""
    path = claims / name
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        # Read at once after the other's create, the entry may not hold its name yet.
        return path.read_text(encoding="utf-8").strip() or "the other lane"
    with os.fdopen(handle, "w", encoding="utf-8") as entry:
        entry.write(owner)
    return None


def unclaimed(claims: Path, names: Sequence[str]) -> list[str]:
    """The files of ``names`` that no lane claimed, hence that no lane ran."""
    return [name for name in names if not (claims / name).exists()]


def first_job_id(worker: int, workers: int, lane: int, lanes: int, ids_before_repeat: int) -> int:
    """The first Slurm job ID of one pytest-xdist worker's private cluster: each worker of
    each lane gets a slice of its own of the ``ids_before_repeat`` IDs, so that no two jobs
    running at once derive one port."""
    return 1 + (lane * workers + worker) * (ids_before_repeat // (workers * lanes))
