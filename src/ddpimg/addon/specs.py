"""Requirement specifiers and versions (PEP 508, PEP 440), read with ``packaging``.

``packaging`` is in ddpimg's image (its lock), but not in every environment ddpimg runs in
(a site's own image, with ddpimg installed beside it): there pip's own copy is used, which
every environment that can build an add-on has, since pip builds it.
"""

from __future__ import annotations

try:
    from packaging import markers, requirements, specifiers, version
except ImportError:  # pragma: no cover - environments without packaging
    from pip._vendor.packaging import (  # type: ignore[no-redef]
        markers,
        requirements,
        specifiers,
        version,
    )

InvalidRequirement = requirements.InvalidRequirement
InvalidVersion = version.InvalidVersion
Marker = markers.Marker
Requirement = requirements.Requirement
SpecifierSet = specifiers.SpecifierSet
Version = version.Version

__all__ = [
    "InvalidRequirement",
    "Marker",
    "Requirement",
    "SpecifierSet",
    "Version",
    "admits",
    "is_valid_version",
]


def is_valid_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def admits(specifier: SpecifierSet, version: str) -> bool:
    """Whether ``version`` (an installed one: a pre-release counts) satisfies ``specifier``;
    a version PEP 440 cannot read satisfies only an empty specifier."""
    if not str(specifier):
        return True
    if not is_valid_version(version):
        return False
    return bool(specifier.contains(version, prereleases=True))
