"""The site's fabric inside the container: every bind target of ``fabric.binds`` must exist
when ``train`` starts. Checked on every rank before the rendezvous, and only inside a
container: on the host itself a target such as ``/opt/nccl-ofi`` names the container's view."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from ddpimg.errors import ProfileError
from ddpimg.site.fabric import split_bind
from ddpimg.site.model import SiteProfile

# Files the container runtimes put at the root of every container they start.
CONTAINER_MARKERS = ("/.singularity.d", "/.dockerenv", "/run/.containerenv")
CONTAINER_VARIABLES = ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER", "container")


def in_container(env: Mapping[str, str], exists: Callable[[str], bool]) -> bool:
    return any(env.get(name) for name in CONTAINER_VARIABLES) or any(
        exists(marker) for marker in CONTAINER_MARKERS
    )


def missing_fabric_paths(profile: SiteProfile, exists: Callable[[str], bool]) -> list[str]:
    """The binds (as written) whose target does not exist."""
    return [bind for bind in profile.fabric.binds if not exists(split_bind(bind)[1])]


def check_fabric_paths(
    profile: SiteProfile,
    env: Mapping[str, str] | None = None,
    exists: Callable[[str], bool] = lambda path: Path(path).exists(),
) -> None:
    """Raise :class:`ProfileError` (exit status 2) naming the missing paths and the key."""
    import os

    if not profile.fabric.binds or not in_container(os.environ if env is None else env, exists):
        return
    missing = missing_fabric_paths(profile, exists)
    if not missing:
        return
    shown = ", ".join(
        target if host == target else f"{target} (bound from host {host})"
        for host, target in map(split_bind, missing)
    )
    raise ProfileError(
        f"site profile {profile.name} ({profile.path}): fabric.binds names {shown}, which "
        "does not exist inside this container",
        hint="start the container with the site's binds (ddpimg sbatch writes them; by hand: "
        "apptainer exec --bind HOST[:TARGET]), or fix fabric.binds if the host path moved "
        "(e.g. a new libfabric version)",
    )
