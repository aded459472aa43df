"""A draft profile as TOML in the shipped schema (site-profiles/README.md), each fact's source
in ``[sources]``, with a header that says what to do next."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ddpimg.probe.draft import Fact
from ddpimg.tomlfile import toml_string

SECTION_ORDER = ("site", "match", "network", "container", "job", "fabric", "hardware")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else toml_string(name)


def _value(value: object) -> str:
    if isinstance(value, bool):
        raise TypeError(f"no boolean keys in a profile: {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    raise TypeError(f"cannot write {value!r} into a profile")


def profile_text(facts: Sequence[Fact], command: str) -> str:
    """The profile TOML; ``command`` is how the probe was run (for the header)."""
    lines = [
        "# A site profile drafted by `ddpimg site probe` (" + command + ").",
        "# Every value cites how it was found in [sources]: `probed: ...` was read from Slurm or",
        "# measured between the probing tasks; `unverified: ...` says what to ask the site.",
        "# Prove it on two nodes before relying on it:",
        "#   srun -N2 --ntasks-per-node 1 ddpimg doctor --site THIS_FILE",
    ]
    sections: dict[str, list[str]] = {}
    tables: list[str] = []
    for fact in facts:
        section, _, key = fact.key.partition(".")
        if section in ("partitions", "qos"):
            limits = fact.value if isinstance(fact.value, dict) else {}
            tables += ["", f"[{section}.{_key(key)}]"]
            tables += [f"{name} = {_value(item)}" for name, item in limits.items()]
            continue
        sections.setdefault(section, []).append(f"{key} = {_value(fact.value)}")
    for section in SECTION_ORDER:
        if section in sections:
            lines += ["", f"[{section}]", *sections[section]]
    lines += tables
    sources = [fact for fact in facts if fact.source]
    lines += ["", "[sources]"]
    lines += [f"{toml_string(fact.key)} = {toml_string(fact.source)}" for fact in sources]
    return "\n".join(lines) + "\n"
