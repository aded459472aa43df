"""Slurm's compressed tasks-per-node strings (SLURM_TASKS_PER_NODE, SLURM_STEP_TASKS_PER_NODE).

``2`` is one node with two tasks, ``4(x2),2`` is two nodes with four tasks then one with two,
``2(x3),1`` is three nodes with two tasks then one with one. Entries follow the node list order.
"""

from __future__ import annotations

import re

from ddpimg.errors import HostlistError

_ENTRY = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?", re.ASCII)


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
    for entry in value.strip().split(","):
        match = _ENTRY.fullmatch(entry)
        if match is None:
            raise error(f"entry {entry!r} is not a count N or a repeated count N(xM)")
        tasks = int(match.group(1))
        repeat = 1 if match.group(2) is None else int(match.group(2))
        if tasks == 0 or repeat == 0:
            raise error(f"entry {entry!r} has a zero count; every node runs at least one task")
        counts += [tasks] * repeat
    return counts
