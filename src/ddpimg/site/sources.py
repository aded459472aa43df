"""Where a profile's facts come from: its ``[sources]`` table.

Every fact a profile states about its site (a key it sets, or an entry of a table such as
``env.NCCL_NET_GDR_LEVEL`` or ``partitions.gpu``) is cited by a source: the URL of the site's
own documentation, ``"unverified: WHY"`` (no public page states it; the reason says what it
rests on), ``"probed: WHEN on NODES: HOW"`` (``ddpimg site probe`` read it from the site's
Slurm or measured it), or ``"choice: WHY"`` (not a fact of the site: ddpimg's own default,
such as the CPU share a rank gets). A source given for a key also covers the entries under it
(``fabric.env`` covers ``fabric.env.NCCL_NET``).

``ddpimg sbatch`` reads the sources of partition and QOS limits: a limit the site documents
is enforced as an error, an unverified one only warns. Pure: no torch, no os.environ.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ddpimg.site.model import SiteProfile
from ddpimg.site.schema import TABLE_KEYS

# What a profile says about itself, not about its site.
NOT_FACTS = ("site.name", "site.description", "sources")
UNVERIFIED = "unverified: "
CHOICE = "choice: "
PROBED = "probed: "


def fact_keys(values: Mapping[str, Any]) -> tuple[str, ...]:
    """The facts in a profile's validated ``values`` (by dotted key), each table entry on
    its own, sorted."""
    keys: list[str] = []
    for dotted, value in values.items():
        if dotted in NOT_FACTS:
            continue
        if dotted in TABLE_KEYS:
            keys += [f"{dotted}.{name}" for name, _ in value]
        else:
            keys.append(dotted)
    return tuple(sorted(keys))


def parents(key: str) -> Iterable[str]:
    """``key`` and every key above it: ``fabric.env.NCCL_NET``, ``fabric.env``, ``fabric``."""
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        yield ".".join(parts[:end])


def source_of(profile: SiteProfile, key: str) -> str:
    """The source citing ``key`` (or a key above it); "" when there is none."""
    sources = dict(profile.sources)
    return next((sources[k] for k in parents(key) if k in sources), "")


def stray_sources(sources: Iterable[str], facts: Iterable[str]) -> list[str]:
    """Source keys that cite no fact of the profile (a typo, or a fact since removed)."""
    covered = {parent for fact in facts for parent in parents(fact)}
    return sorted(key for key in sources if key not in covered)


def uncited(profile: SiteProfile, facts: Iterable[str]) -> list[str]:
    """The facts of ``profile`` that no source cites."""
    return [fact for fact in facts if not source_of(profile, fact)]


def is_documented(source: str) -> bool:
    """A source that states the fact with authority: a page of the site's documentation, or
    the site's own Slurm as ``ddpimg site probe`` read it."""
    return source.startswith(("https://", PROBED))
