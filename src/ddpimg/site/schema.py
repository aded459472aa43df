"""The site-profile schema, written once as data: every key, its type, its domain, and where
its value goes in :class:`~ddpimg.site.model.SiteProfile`.

``SCHEMA`` maps dotted keys (``network.interfaces``) to a :class:`Key`. A key without a dot
(``env``) is a whole section holding free-form entries. ``site-profiles/README.md`` documents
the same keys for people; a test keeps the two in step.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from ddpimg.site.fabric import TRANSPORTS, check_binds, check_library_paths
from ddpimg.site.master import check_master_template
from ddpimg.tomlfile import INTEGER, NUMBER, STRING, STRING_LIST, Kind, is_int

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
MIN_PORT = 1024
MAX_PORT = 65535


def _is_port_pair(value: object) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(is_int(item) for item in value)


def _to_sorted_items(value: Any) -> Any:
    return tuple(sorted(value.items()))


PORT_PAIR = Kind("a list of two integers [low, high]", _is_port_pair, tuple)
STRING_TABLE = Kind(
    'a table of strings (NAME = "value")',
    lambda value: isinstance(value, dict),
    _to_sorted_items,
    entry=STRING,
)


def _valid_profile_name(value: str) -> str | None:
    if not value:
        return "it is empty"
    if not _PROFILE_NAME.match(value):
        return "use letters, digits, '.', '_' and '-' only, starting with a letter or digit"
    return None


def _no_empty_items(value: list[str]) -> str | None:
    if any(not item.strip() for item in value):
        return "it has an empty entry"
    return None


def _interface_names(value: list[str]) -> str | None:
    # The names are joined with commas into NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME.
    for item in value:
        if not item or any(c.isspace() or c in ",=^" for c in item):
            return f"'{item}' is not an interface name (no spaces, ',', '=' or '^')"
    return None


def _env_names(value: dict[str, str]) -> str | None:
    for name in value:
        if not _ENV_NAME.match(name):
            return f"'{name}' is not an environment variable name"
    return None


def _port_range(value: list[int]) -> str | None:
    low, high = value
    if not MIN_PORT <= low <= high <= MAX_PORT:
        return f"it needs {MIN_PORT} <= low <= high <= {MAX_PORT}"
    return None


def _at_least(minimum: int) -> Callable[[int], str | None]:
    def check(value: int) -> str | None:
        return f"it must be at least {minimum}" if value < minimum else None

    return check


def _at_least_number(minimum: float) -> Callable[[float], str | None]:
    def check(value: float) -> str | None:
        return f"it must be at least {minimum:g}" if value < minimum else None

    return check


_ARCH = re.compile(r"(sm_\d+[a-z]?|gfx[0-9a-f]+)\Z")


def _gpu_arch(value: str) -> str | None:
    if value and not _ARCH.match(value):
        return "write the GPU architecture as sm_XY (NVIDIA) or gfxNNN (AMD)"
    return None


def _build_name(value: str) -> str | None:
    from ddpimg.hardware.builds import BUILDS

    if value and value not in BUILDS:
        return f'it must be one of {", ".join(sorted(BUILDS))}, or "" for none'
    return None


# A NamedTuple, like Kind, rather than a frozen dataclass: the schema is a constant, built at
# every rank's start-up (ddpimg env).
class Key(NamedTuple):
    """One schema entry. ``target`` is the SiteProfile field it fills: ``name``,
    ``match.<field>`` (MatchRule) or ``job.<field>`` (JobDefaults). ``check`` returns why a
    well-typed value is still invalid, or None."""

    kind: Kind
    target: str
    required: bool = False
    choices: tuple[str, ...] = ()
    check: Callable[[Any], str | None] | None = None


SCHEMA: dict[str, Key] = {
    "site.name": Key(STRING, "name", required=True, check=_valid_profile_name),
    "site.description": Key(STRING, "description"),
    "match.hostnames": Key(STRING_LIST, "match.hostnames", check=_no_empty_items),
    "match.slurm_cluster_names": Key(
        STRING_LIST, "match.slurm_cluster_names", check=_no_empty_items
    ),
    "match.env": Key(STRING_TABLE, "match.env", check=_env_names),
    "network.interfaces": Key(STRING_LIST, "interfaces", check=_interface_names),
    "network.master_addr": Key(STRING, "master_addr", check=check_master_template),
    "network.port_range": Key(PORT_PAIR, "port_range", check=_port_range),
    "network.backend": Key(STRING, "backend", choices=("", "nccl", "gloo")),
    "env": Key(STRING_TABLE, "exports", check=_env_names),
    "clean.remove": Key(STRING_LIST, "remove", check=_no_empty_items),
    "clean.keep": Key(STRING_LIST, "keep", check=_no_empty_items),
    "job.gpus_per_node": Key(INTEGER, "job.gpus_per_node", check=_at_least(0)),
    "job.gpu_type": Key(STRING, "job.gpu_type"),
    "job.gpu_request": Key(STRING, "job.gpu_request", choices=("gres", "gpus-per-node")),
    "job.cpus_per_task": Key(INTEGER, "job.cpus_per_task", check=_at_least(1)),
    "job.partition": Key(STRING, "job.partition"),
    "job.gpu_vendor": Key(STRING, "job.gpu_vendor", choices=("nvidia", "amd")),
    "job.constraint": Key(STRING, "job.constraint"),
    "job.binds": Key(STRING_LIST, "job.binds", check=_no_empty_items),
    "fabric.transport": Key(STRING, "fabric.transport", choices=TRANSPORTS),
    "fabric.binds": Key(STRING_LIST, "fabric.binds", check=check_binds),
    "fabric.env": Key(STRING_TABLE, "fabric.env", check=_env_names),
    "fabric.library_paths": Key(STRING_LIST, "fabric.library_paths", check=check_library_paths),
    "fabric.min_busbw_gbps": Key(NUMBER, "fabric.min_busbw_gbps", check=_at_least_number(0)),
    "hardware.gpus": Key(STRING, "hardware.gpus"),
    "hardware.arch": Key(STRING, "hardware.arch", check=_gpu_arch),
    "hardware.build": Key(STRING, "hardware.build", check=_build_name),
}

SECTIONS: tuple[str, ...] = tuple(sorted({dotted.split(".", 1)[0] for dotted in SCHEMA}))


def section_keys(section: str) -> list[str]:
    """The keys of ``section`` without the section prefix, sorted."""
    prefix = f"{section}."
    return sorted(dotted[len(prefix) :] for dotted in SCHEMA if dotted.startswith(prefix))
