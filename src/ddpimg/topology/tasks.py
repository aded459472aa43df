"""Slurm's compressed tasks-per-node strings (SLURM_TASKS_PER_NODE, SLURM_STEP_TASKS_PER_NODE).

``2`` is one node with two tasks, ``4(x2),2`` is two nodes with four tasks then one with two,
``2(x3),1`` is three nodes with two tasks then one with one. Entries follow the node list order.
"""

from __future__ import annotations

import re

from ddpimg.errors import HostlistError
from ddpimg.topology.hostlist import MAX_HOSTS
from ddpimg.topology.model import MAX_WORLD_SIZE

_ENTRY = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?", re.ASCII)
# More digits than any count below the bounds has: int() of a longer one is refused unread.
_DIGITS = 12


def parse_tasks_per_node(value: str, variable: str = "SLURM_TASKS_PER_NODE") -> list[int]:
    """The number of tasks on each node, in node order.

    ``variable`` only names the source of ``value`` in error messages. Raises HostlistError
    for an empty value or entry, an entry that is not ``N`` or ``N(xM)``, and zero counts.
    """

    def error(problem: str) -> HostlistError:
        return HostlistError(
            f"{variable}={value!r}: {problem}",
            "Slurm writes tasks per node as counts with optional repeats, such as 4(x2),2; "
            "check where the variable was set",
        )

    if not value.strip():
        raise error("the value is empty")
    counts: list[int] = []
    total = 0
    for entry in value.strip().split(","):
        match = _ENTRY.fullmatch(entry)
        if match is None or max(len(match.group(1)), len(match.group(2) or "")) > _DIGITS:
            raise error(f"entry {entry!r} is not a count N or a repeated count N(xM)")
        tasks = int(match.group(1))
        repeat = 1 if match.group(2) is None else int(match.group(2))
        if tasks == 0 or repeat == 0:
            raise error(f"entry {entry!r} has a zero count; every node runs at least one task")
        # Checked before the list grows: 2(x100000000) would take gigabytes to refuse.
        total += tasks * repeat
        if len(counts) + repeat > MAX_HOSTS or total > MAX_WORLD_SIZE:
            raise error(
                f"entry {entry!r} makes more than {MAX_HOSTS:,} nodes or {MAX_WORLD_SIZE:,} "
                "tasks; is a count mistyped?"
            )
        counts += [tasks] * repeat
    return counts
