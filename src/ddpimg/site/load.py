"""Load one site profile (TOML) and validate it strictly against :data:`schema.SCHEMA`.

Every problem is a :class:`~ddpimg.errors.ProfileError` naming the file and the dotted key:
malformed TOML (with TOML's line and column), unknown sections and keys (with the closest
known key), wrong types (expected type and the value found), missing or invalid values, and
a ``site.name`` that differs from the file name. An exported ``NCCL_*`` / ``GLOO_*`` variable
that is not a known name only warns (:class:`ProfileWarning`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ddpimg.errors import ProfileError
from ddpimg.site import known_vars
from ddpimg.site.model import Container, Fabric, Hardware, JobDefaults, MatchRule, SiteProfile
from ddpimg.site.schema import SCHEMA, SECTIONS, Key, section_keys
from ddpimg.site.sources import fact_keys, stray_sources
from ddpimg.tomlfile import read_toml

# difflib, json and warnings serve only to report a problem, so they are imported where one is
# found: ddpimg env, which every rank runs at start-up, does not pay for them.

SCHEMA_HINT = "see site-profiles/README.md for every key, its type and an example"
_TOML_TYPE_NAMES = {
    bool: "boolean",
    int: "integer",
    float: "float",
    str: "string",
    list: "array",
    dict: "table",
}


class ProfileWarning(UserWarning):
    """A profile is usable but probably not what its author meant (e.g. an unknown NCCL_*)."""


def load_profile(path: str | Path) -> SiteProfile:
    """Read and validate the profile at ``path``."""
    path = Path(path)
    data, document = read_toml(
        path,
        ProfileError,
        what="site profile",
        path_hint="check the path given by --site, DDPIMG_SITE or DDPIMG_SITE_PATH",
    )
    values = _validate(path, document)
    profile = _build(path, values, hashlib.sha256(data).hexdigest())
    if profile.name != path.stem:
        raise ProfileError(
            f"{path}: site.name '{profile.name}' does not match the file name '{path.stem}'",
            hint=f'rename the file to {profile.name}.toml or set name = "{path.stem}"',
        )
    _check_across_keys(path, profile)
    _warn_unknown_exports(path, profile)
    return profile


def _check_across_keys(path: Path, profile: SiteProfile) -> None:
    """What no single key's check can see: keys that must agree with each other."""
    job = profile.job
    if job.gpu_type and job.gpu_types and job.gpu_type not in job.gpu_types:
        raise ProfileError(
            f"{path}: job.gpu_type '{job.gpu_type}' is not one of job.gpu_types "
            f"({', '.join(job.gpu_types)})",
            hint="Slurm's GPU type names are case-sensitive: write it as job.gpu_types does",
        )
    if job.max_gpus_per_node and job.max_gpus_per_node < job.gpus_per_node:
        raise ProfileError(
            f"{path}: job.max_gpus_per_node {job.max_gpus_per_node} is less than "
            f"job.gpus_per_node {job.gpus_per_node}",
            hint="max_gpus_per_node is the largest GPU node; gpus_per_node the default request",
        )
    stray = stray_sources(dict(profile.sources), profile.facts)
    if stray:
        raise ProfileError(
            f"{path}: [sources] cites {', '.join(repr(key) for key in stray)}, which the "
            "profile does not set",
            hint="a source key is the dotted key of a fact the file sets (job.partition, "
            "env.NCCL_NET_GDR_LEVEL, partitions.gpu) or a section holding some",
        )


def _validate(path: Path, document: dict[str, Any]) -> dict[str, Any]:
    """The document's values by dotted key, checked against the schema and converted."""
    values: dict[str, Any] = {}
    for top, value in document.items():
        if top in SCHEMA:
            values[top] = _checked(path, top, value, SCHEMA[top])
        elif top not in SECTIONS:
            raise _unknown_top_level(path, top, value)
        elif not isinstance(value, dict):
            raise ProfileError(
                f"{path}: [{top}] must be a table, found {_show(value)} ({_type_name(value)})",
                hint=f"write it as a section: [{top}] on its own line, then its keys",
            )
        else:
            for key, item in value.items():
                dotted = f"{top}.{key}"
                if dotted not in SCHEMA:
                    raise _unknown_key(path, top, dotted)
                values[dotted] = _checked(path, dotted, item, SCHEMA[dotted])
    for dotted, spec in SCHEMA.items():
        if spec.required and dotted not in values:
            section, _, key = dotted.partition(".")
            raise ProfileError(
                f"{path}: missing required key '{dotted}'",
                hint=f'add [{section}] with {key} = "{path.stem}"',
            )
    return values


def _checked(path: Path, dotted: str, value: object, spec: Key) -> Any:
    kind = spec.kind
    if not kind.accepts(value):
        raise _wrong_type(path, dotted, value, kind.name)
    if kind.entry is not None and isinstance(value, dict):
        for name, item in value.items():
            if not kind.entry.accepts(item):
                raise _wrong_type(path, f"{dotted}.{name}", item, kind.entry.name)
    problem = None
    if spec.choices and value not in spec.choices:
        problem = f"it must be one of {_choices(spec.choices)}"
    elif spec.check is not None:
        problem = spec.check(value)
    if problem is not None:
        raise ProfileError(
            f"{path}: key '{dotted}' is invalid: {problem}; found {_show(value)}",
            hint=SCHEMA_HINT,
        )
    return kind.convert(value)


def _build(path: Path, values: dict[str, Any], content_hash: str) -> SiteProfile:
    fields: dict[str, dict[str, Any]] = {
        "": {},
        "match": {},
        "job": {},
        "fabric": {},
        "hardware": {},
        "container": {},
    }
    for dotted, value in values.items():
        group, _, field = SCHEMA[dotted].target.rpartition(".")
        fields[group][field] = value
    return SiteProfile(
        path=str(path),
        content_hash=content_hash,
        match=MatchRule(**fields["match"]),
        job=JobDefaults(**fields["job"]),
        fabric=Fabric(**fields["fabric"]),
        hardware=Hardware(**fields["hardware"]),
        container=Container(**fields["container"]),
        facts=fact_keys(values),
        **{"description": "", **fields[""]},
    )


def _warn_unknown_exports(path: Path, profile: SiteProfile) -> None:
    for section, exports in (("env", profile.exports), ("fabric.env", profile.fabric.env)):
        _warn_unknown(path, section, exports)


def _warn_unknown(path: Path, section: str, exports: tuple[tuple[str, str], ...]) -> None:
    for name, _ in exports:
        if known_vars.is_unknown(name):
            import warnings

            closest = known_vars.closest_known(name)
            suggestion = f"; did you mean '{closest}'?" if closest else ""
            warnings.warn(
                f"{path}: [{section}] exports '{name}', which is not a known NCCL/Gloo variable"
                f"{suggestion} (NCCL ignores names it does not know)",
                ProfileWarning,
                stacklevel=4,
            )


def _unknown_top_level(path: Path, top: str, value: object) -> ProfileError:
    import difflib

    if isinstance(value, dict):
        closest = difflib.get_close_matches(top, SECTIONS, n=1)
        suggestion = f"did you mean [{closest[0]}]? " if closest else ""
        return ProfileError(
            f"{path}: unknown section [{top}]",
            hint=f"{suggestion}known sections: {', '.join(f'[{s}]' for s in SECTIONS)}",
        )
    # A bare key above the first section header: suggest the section that has it.
    owners = [dotted for dotted in SCHEMA if dotted.rpartition(".")[2] == top]
    closest = owners or difflib.get_close_matches(top, list(SCHEMA), n=1)
    suggestion = f"did you mean '{closest[0]}'? " if closest else ""
    return ProfileError(
        f"{path}: unknown key '{top}' outside any section",
        hint=f"{suggestion}keys belong in sections: {', '.join(f'[{s}]' for s in SECTIONS)}",
    )


def _unknown_key(path: Path, section: str, dotted: str) -> ProfileError:
    import difflib

    known = section_keys(section)
    key = dotted.partition(".")[2]
    closest = difflib.get_close_matches(key, known, n=1)
    suggestion = f"did you mean '{section}.{closest[0]}'? " if closest else ""
    return ProfileError(
        f"{path}: unknown key '{dotted}'",
        hint=f"{suggestion}known keys in [{section}]: {', '.join(known)}",
    )


def _wrong_type(path: Path, dotted: str, value: object, expected: str) -> ProfileError:
    return ProfileError(
        f"{path}: key '{dotted}' must be {expected}, found {_show(value)} ({_type_name(value)})",
        hint=SCHEMA_HINT,
    )


def _type_name(value: object) -> str:
    for python_type, name in _TOML_TYPE_NAMES.items():
        if isinstance(value, python_type):
            return name
    return type(value).__name__


def _show(value: object) -> str:
    """The value much as it was written in TOML."""
    import json

    return json.dumps(value, default=str, ensure_ascii=False)


def _choices(choices: tuple[str, ...]) -> str:
    import json

    return ", ".join(json.dumps(choice) for choice in choices)
