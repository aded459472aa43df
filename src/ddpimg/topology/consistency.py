"""The one consistency check every rank source's result goes through.

Launcher variables can contradict each other when some were exported by hand, copied from
another job or set by a wrapper: a rank beyond the world size, a node list shorter than the
node count, tasks per node that do not add up. Each source says where every field came from
(``origin``: field name -> variable name, or an expression for derived fields) so the error
names the variables that disagree and the values found.
"""

from __future__ import annotations

import re

from ddpimg.errors import LauncherError
from ddpimg.topology.model import MAX_WORLD_SIZE, Env, Origin, Topology

_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABELS = {"num_nodes": "node count", "hosts": "host list"}
_HINT = (
    "these variables come from one launch and must agree; look for values exported by hand, "
    "left over from another job, or changed by a wrapper script"
)


def check_topology(topology: Topology, origin: Origin, env: Env) -> Topology:
    """Return ``topology`` unchanged when its fields agree; raise LauncherError otherwise."""
    show = _Describer(topology, origin, env)

    def fail(problem: str) -> LauncherError:
        return LauncherError(f"{topology.source}: {problem}", _HINT)

    for size in ("world_size", "local_world_size", "num_nodes"):
        if getattr(topology, size) < 1:
            raise fail(f"{show(size)} must be at least 1")
        if getattr(topology, size) > MAX_WORLD_SIZE:
            raise fail(f"{show(size)} is more than {MAX_WORLD_SIZE:,}, the most ddpimg runs")
    for index in ("rank", "local_rank", "node_rank"):
        if getattr(topology, index) < 0:
            raise fail(f"{show(index)} must not be negative")
    for index, size in (
        ("rank", "world_size"),
        ("local_rank", "local_world_size"),
        ("node_rank", "num_nodes"),
    ):
        if getattr(topology, index) >= getattr(topology, size):
            raise fail(f"{show(index)} is not below {show(size)}")
    if topology.local_world_size > topology.world_size:
        raise fail(f"{show('local_world_size')} is larger than {show('world_size')}")
    if topology.num_nodes > topology.world_size:
        raise fail(f"{show('num_nodes')} is larger than {show('world_size')}")
    if topology.hosts and len(topology.hosts) != topology.num_nodes:
        raise fail(
            f"{show('hosts')} names {_count(len(topology.hosts), 'node')} but {show('num_nodes')}"
        )
    per_node = topology.tasks_per_node
    if per_node:
        if len(per_node) != topology.num_nodes:
            raise fail(
                f"{show('tasks_per_node')} covers {_count(len(per_node), 'node')} "
                f"but {show('num_nodes')}"
            )
        if sum(per_node) != topology.world_size:
            raise fail(
                f"{show('tasks_per_node')} adds up to {_count(sum(per_node), 'task')} "
                f"but {show('world_size')}"
            )
        if per_node[topology.node_rank] != topology.local_world_size:
            raise fail(
                f"{show('tasks_per_node')} gives {_count(per_node[topology.node_rank], 'task')} "
                f"to node "
                f"{show('node_rank')} but {show('local_world_size')}"
            )
    return topology


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


class _Describer:
    """Formats a field as ``VARIABLE=value`` or ``field value (from expression)``."""

    def __init__(self, topology: Topology, origin: Origin, env: Env) -> None:
        self._topology = topology
        self._origin = origin
        self._env = env

    def __call__(self, field: str) -> str:
        source = self._origin.get(field)
        if source is not None and _VARIABLE.fullmatch(source) and source in self._env:
            return f"{source}={self._env[source].strip()}"
        value = getattr(self._topology, field)
        if isinstance(value, tuple):
            value = ",".join(str(item) for item in value)
        label = _LABELS.get(field, field.replace("_", " "))
        return f"{label} {value} (from {source})" if source else f"{label} {value}"
