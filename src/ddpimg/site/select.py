"""Which site profile applies, and why.

Precedence, highest first (each cell is tested):

1. ``--site NAME|PATH`` (the ``explicit`` argument); a value containing ``/`` or ending in
   ``.toml`` is a file path, anything else a profile name;
2. ``DDPIMG_SITE`` (same forms);
3. auto-detection: every known profile whose ``[match]`` rules fit this machine
   (``SLURM_CLUSTER_NAME`` first: a profile naming other clusters is out; then the short
   hostname and marker variables); two matches are an error, never a silent pick;
4. the ``generic`` profile.

Profiles are found by name in the directories of ``DDPIMG_SITE_PATH`` (colon-separated,
searched first, so a user's file shadows a shipped one of the same name), then in the
profiles shipped with ddpimg. Pure: reads only the ``env`` mapping it is given and the
profile files.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ddpimg.cleanenv import matches_pattern
from ddpimg.errors import ProfileError
from ddpimg.site.load import load_profile
from ddpimg.site.model import SiteProfile

SITE_VAR = "DDPIMG_SITE"
SITE_PATH_VAR = "DDPIMG_SITE_PATH"
DEFAULT_PROFILE = "generic"
SHIPPED_DIR_NAME = "site-profiles"
# Where `[tool.setuptools.data-files]` in pyproject.toml installs the shipped profiles.
INSTALLED_SUBDIR = Path("share", "ddpimg", SHIPPED_DIR_NAME)
# The parents of the package directory that may be a source checkout's root: `src/` and the
# repository itself. Looking higher could pick up an unrelated `site-profiles` directory.
_CHECKOUT_LEVELS = 2


@dataclass(frozen=True)
class Selection:
    """The profile chosen and the reason, e.g. ``"--site"`` or
    ``"auto: hostname 'puhti-login1' matched 'puhti-*'"``."""

    profile: SiteProfile
    reason: str


def shipped_profile_dir() -> Path | None:
    """The directory of the profiles shipped with ddpimg, or None if it cannot be found.

    A source checkout or editable install has them at ``<repo>/site-profiles``; a regular
    install has them under ``<prefix>/share/ddpimg/site-profiles``.
    """
    # The ddpimg package's directory (this file is ddpimg/site/select.py), found without
    # reading the package root.
    package_dir = Path(__file__).resolve().parents[1]
    for parent in package_dir.parents[:_CHECKOUT_LEVELS]:
        candidate = parent / SHIPPED_DIR_NAME
        if (candidate / f"{DEFAULT_PROFILE}.toml").is_file():
            return candidate
    import sysconfig  # only an installed ddpimg gets here

    for prefix in dict.fromkeys((sys.prefix, sysconfig.get_path("data"))):
        candidate = Path(prefix) / INSTALLED_SUBDIR
        if candidate.is_dir():
            return candidate
    return None


def profile_dirs(env: Mapping[str, str]) -> list[Path]:
    """The directories searched for profiles, in order: DDPIMG_SITE_PATH, then shipped."""
    dirs: list[Path] = []
    # Empty entries are skipped so that `DDPIMG_SITE_PATH=$DDPIMG_SITE_PATH:/mine` works
    # when the variable was unset before.
    for entry in env.get(SITE_PATH_VAR, "").split(":"):
        if not entry:
            continue
        directory = Path(entry)
        if not directory.is_dir():
            raise ProfileError(
                f"{SITE_PATH_VAR} names '{entry}', which is not a directory",
                hint=f"fix or remove that entry; {SITE_PATH_VAR} is a colon-separated list of "
                "directories holding NAME.toml profiles",
            )
        dirs.append(directory)
    shipped = shipped_profile_dir()
    if shipped is not None:
        dirs.append(shipped)
    return dirs


def known_profiles(env: Mapping[str, str]) -> dict[str, Path]:
    """Every profile name found, with its file; the first directory holding a name wins."""
    found: dict[str, Path] = {}
    for directory in profile_dirs(env):
        for path in sorted(directory.glob("*.toml")):
            found.setdefault(path.stem, path)
    return found


def match_reason(profile: SiteProfile, env: Mapping[str, str], hostname: str) -> str | None:
    """Why ``profile`` fits this machine (the first of its rules that does), or None.

    ``SLURM_CLUSTER_NAME`` comes first: inside a job of another cluster a profile that names
    its own clusters never matches, whatever the host is called (node names such as
    ``node0401`` or ``r01g05`` recur across sites); outside Slurm the host name and marker
    variables decide."""
    cluster = env.get("SLURM_CLUSTER_NAME", "")
    if cluster and profile.match.slurm_cluster_names:
        if cluster in profile.match.slurm_cluster_names:
            return f"auto: SLURM_CLUSTER_NAME '{cluster}' matched"
        return None
    short = hostname.split(".", 1)[0].lower()
    for pattern in profile.match.hostnames:
        # Host names are case-insensitive; profile patterns may be written either way.
        if short and matches_pattern(short, pattern.lower()):
            return f"auto: hostname '{short}' matched '{pattern}'"
    for name, pattern in profile.match.env:
        if name in env and matches_pattern(env[name], pattern):
            return f"auto: {name} '{env[name]}' matched '{pattern}'"
    return None


def select_profile(env: Mapping[str, str], hostname: str, explicit: str | None = None) -> Selection:
    """The profile for this process: explicit > DDPIMG_SITE > auto-detection > generic."""
    if explicit is not None:
        return Selection(_resolve(env, explicit, "--site"), "--site")
    if SITE_VAR in env:
        return Selection(_resolve(env, env[SITE_VAR], SITE_VAR), SITE_VAR)
    known = known_profiles(env)
    matches: list[Selection] = []
    for name in sorted(known):
        profile = load_profile(known[name])
        reason = match_reason(profile, env, hostname)
        if reason is not None:
            matches.append(Selection(profile, reason))
    if len(matches) > 1:
        described = " and ".join(
            f"'{m.profile.name}' ({m.reason.removeprefix('auto: ')})" for m in matches
        )
        raise ProfileError(
            f"more than one site profile matches this machine: {described}",
            hint=f"choose one with --site NAME or {SITE_VAR}=NAME",
        )
    if matches:
        return matches[0]
    if DEFAULT_PROFILE not in known:
        raise _unknown(env, known, DEFAULT_PROFILE, "the default")
    return Selection(load_profile(known[DEFAULT_PROFILE]), "default")


def _resolve(env: Mapping[str, str], value: str, source: str) -> SiteProfile:
    if not value:
        raise ProfileError(
            f"{source} is empty",
            hint="give a profile name or the path of a .toml file"
            + (f", or unset {source}" if source == SITE_VAR else ""),
        )
    if "/" in value or value.endswith(".toml"):
        if not Path(value).is_file():
            raise ProfileError(
                f"site profile file '{value}' (from {source}) does not exist",
                hint="check the path, or give a profile name instead",
            )
        return load_profile(value)
    known = known_profiles(env)
    if value not in known:
        raise _unknown(env, known, value, source)
    return load_profile(known[value])


def _unknown(
    env: Mapping[str, str], known: Mapping[str, Path], name: str, source: str
) -> ProfileError:
    searched = ", ".join(str(d) for d in profile_dirs(env)) or "no directories"
    return ProfileError(
        f"unknown site profile '{name}' (from {source})",
        hint=f"known profiles: {', '.join(sorted(known)) or 'none'} (searched {searched}); "
        "or give the path of a .toml file",
    )
