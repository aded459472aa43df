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

from ddpimg.errors import DdpimgError
from ddpimg.shellpath import expandable_path_problem
from ddpimg.site.container import RUNTIMES
from ddpimg.site.fabric import TRANSPORTS, check_binds, check_library_paths
from ddpimg.site.master import check_master_template
from ddpimg.site.model import Limits
from ddpimg.slurm_units import parse_slurm_memory, parse_slurm_time
from ddpimg.tomlfile import INTEGER, NUMBER, STRING, STRING_LIST, Kind, is_int

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# An annotation name is written as a TOML dotted key of bare keys into the script's EDF.
_ANNOTATION_NAME = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\Z")
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


# A partition's or QOS's limits: key -> (TOML type, check of the value).
def _slurm_time(value: str) -> str | None:
    try:
        parse_slurm_time(value, "max_time", DdpimgError)
    except DdpimgError as err:
        return err.message
    return None


def _slurm_memory(value: str) -> str | None:
    try:
        parse_slurm_memory(value, "max_mem", DdpimgError)
    except DdpimgError as err:
        return err.message
    return None


def _one_line(value: str) -> str | None:
    # Written into the batch script as a comment: a line break would end the comment.
    return "it contains a line break or control character" if _CONTROL.search(value) else None


def _positive(value: int) -> str | None:
    return None if value >= 1 else f"{value} is not at least 1"


_LIMIT_KEYS: dict[str, tuple[Kind, Callable[[Any], str | None]]] = {
    "max_time": (STRING, _slurm_time),
    "min_nodes": (INTEGER, _positive),
    "max_nodes": (INTEGER, _positive),
    "max_gpus": (INTEGER, _positive),
    "min_gpus_per_node": (INTEGER, _positive),
    "max_mem": (STRING, _slurm_memory),
    "note": (STRING, _one_line),
}


def _is_limits_table(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(item, dict) for item in value.values())


def _limits(value: dict[str, dict[str, Any]]) -> str | None:
    for name, table in value.items():
        for key, item in table.items():
            if key not in _LIMIT_KEYS:
                return (
                    f"entry '{name}' has an unknown key '{key}' (known: {', '.join(_LIMIT_KEYS)})"
                )
            kind, check = _LIMIT_KEYS[key]
            problem = check(item) if kind.accepts(item) else f"it must be {kind.name}"
            if problem is not None:
                return f"entry '{name}', {key}: {problem}"
    return None


def _to_limits(value: dict[str, dict[str, Any]]) -> tuple[tuple[str, Limits], ...]:
    return tuple(sorted((name, Limits(**table)) for name, table in value.items()))


LIMITS_TABLE = Kind(
    "a table of tables, one [SECTION.NAME] per partition or QOS",
    _is_limits_table,
    _to_limits,
    example='{ gpu = { max_time = "3-00:00:00" } }',
)
SOURCE_PREFIXES = ("https://", "unverified: ", "choice: ", "probed: ")


def _sources(value: dict[str, str]) -> str | None:
    for key, source in value.items():
        if not source.startswith(SOURCE_PREFIXES) or source in SOURCE_PREFIXES:
            return (
                f"sources.{key}: '{source}' is not a URL (https://...), "
                "'unverified: WHY', 'choice: WHY' or 'probed: WHEN: HOW'"
            )
    return None


def check_profile_name(value: str) -> str | None:
    if not value:
        return "it is empty"
    if not _PROFILE_NAME.match(value):
        return "use letters, digits, '.', '_' and '-' only, starting with a letter or digit"
    return None


def _no_empty_items(value: list[str]) -> str | None:
    if any(not item.strip() for item in value):
        return "it has an empty entry"
    return None


def _no_whitespace(value: str) -> str | None:
    return "it contains whitespace" if any(c.isspace() for c in value) else None


def _interface_names(value: list[str]) -> str | None:
    # The names are joined with commas into NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME.
    for item in value:
        if not item or any(c.isspace() or c in ",=^" for c in item):
            return f"'{item}' is not an interface name (no spaces, ',', '=' or '^')"
    return None


def _env_name_list(value: list[str]) -> str | None:
    return _env_names(dict.fromkeys(value, ""))


def _env_names(value: dict[str, str]) -> str | None:
    for name in value:
        if not _ENV_NAME.match(name):
            return f"'{name}' is not an environment variable name"
    return None


def _words(value: list[str]) -> str | None:
    for item in value:
        if not item or any(c.isspace() or c < " " for c in item):
            return f"'{item}' is not one word"
    return None


def _option_words(value: list[str]) -> str | None:
    # Each entry is one word of the runtime's command line, quoted there as one.
    for item in value:
        if not item.startswith("-") or any(c.isspace() for c in item):
            return f"'{item}' is not one option word (--name or --name=value, no whitespace)"
    return None


def _annotation_names(value: dict[str, str]) -> str | None:
    for name in value:
        if not _ANNOTATION_NAME.match(name):
            return f"'{name}' is not a dotted name (letters, digits, '_' and '-' between dots)"
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
    ``match.<field>`` (MatchRule), ``job.<field>`` (JobDefaults), ``container.<field>``
    (Container), ... ``check`` returns why a well-typed value is still invalid, or None."""

    kind: Kind
    target: str
    required: bool = False
    choices: tuple[str, ...] = ()
    check: Callable[[Any], str | None] | None = None


SCHEMA: dict[str, Key] = {
    "site.name": Key(STRING, "name", required=True, check=check_profile_name),
    "site.description": Key(STRING, "description"),
    "site.status": Key(STRING, "status", choices=("active", "retired")),
    "site.status_note": Key(STRING, "status_note"),
    "site.successor": Key(STRING, "successor", check=check_profile_name),
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
    "job.addons": Key(STRING_LIST, "job.addons", check=_no_empty_items),
    "job.gpu_types": Key(STRING_LIST, "job.gpu_types", check=_no_empty_items),
    "job.max_gpus_per_node": Key(INTEGER, "job.max_gpus_per_node", check=_at_least(0)),
    "job.max_gpus_constraint": Key(STRING, "job.max_gpus_constraint"),
    "job.qos": Key(STRING, "job.qos"),
    "job.mem_per_gpu": Key(STRING, "job.mem_per_gpu", check=_slurm_memory),
    "job.cpu_bind": Key(STRING, "job.cpu_bind", check=_no_whitespace),
    "job.local_dir": Key(STRING, "job.local_dir", check=expandable_path_problem),
    "job.local_dir_kind": Key(STRING, "job.local_dir_kind", choices=("", "disk", "ram")),
    "job.max_nodes": Key(INTEGER, "job.max_nodes", check=_at_least(1)),
    "job.unset_env": Key(STRING_LIST, "job.unset_env", check=_env_name_list),
    "job.modules": Key(STRING_LIST, "job.modules", check=_words),
    "job.module_use": Key(STRING_LIST, "job.module_use", check=check_library_paths),
    "container.runtime": Key(STRING, "container.runtime", choices=("", *RUNTIMES)),
    "container.image": Key(STRING, "container.image"),
    "container.options": Key(STRING_LIST, "container.options", check=_option_words),
    "container.image_from": Key(STRING, "container.image_from", choices=("", "site", "ddpimg")),
    "container.annotations": Key(STRING_TABLE, "container.annotations", check=_annotation_names),
    "partitions": Key(LIMITS_TABLE, "partitions", check=_limits),
    "qos": Key(LIMITS_TABLE, "qos", check=_limits),
    "sources": Key(STRING_TABLE, "sources", check=_sources),
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
# Keys whose value is a table of named entries: each entry is a fact of its own
# (``env.NCCL_NET_GDR_LEVEL``, ``partitions.gpu``), which ``[sources]`` may cite by name.
TABLE_KEYS: tuple[str, ...] = tuple(
    dotted for dotted, key in SCHEMA.items() if key.kind in (STRING_TABLE, LIMITS_TABLE)
)


def section_keys(section: str) -> list[str]:
    """The keys of ``section`` without the section prefix, sorted."""
    prefix = f"{section}."
    return sorted(dotted[len(prefix) :] for dotted in SCHEMA if dotted.startswith(prefix))
