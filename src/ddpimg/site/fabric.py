"""Host fabric as data: what a site's network stack needs from the container, and which
image flavour its GPUs need. Pure: no torch, no os.environ.

A profile's ``[fabric]`` section says which transport NCCL is expected to use between nodes
(``ib``: InfiniBand verbs, built into NCCL; ``ofi``: libfabric through the aws-ofi-nccl /
aws-ofi-rccl plugin, e.g. on HPE Slingshot; ``socket``: plain TCP, i.e. no fabric is
expected), the host paths the container needs bound (the plugin, libfabric, libcxi), the
variables that select and tune it, the library directories (inside the container) the
dynamic linker must search, and the bus bandwidth a multi-node ``ddpimg doctor`` must reach.

Binds are written as apptainer takes them: ``HOST`` (the same path inside) or
``HOST:TARGET``. ``train`` checks inside the container, at start, that every TARGET exists
(:func:`ddpimg.runtime.fabric.check_fabric_paths`): a bind the runtime could not make
(Apptainer skips a missing source with only a warning) then stops the job with the path and
the profile key, before any rank waits for another.
"""

from __future__ import annotations

from collections.abc import Iterable

from ddpimg.site.model import SiteProfile

TRANSPORTS = ("", "ib", "ofi", "socket")
TRANSPORT_WORDS = {
    "ib": "InfiniBand (NCCL's own IB transport)",
    "ofi": "libfabric through the aws-ofi-nccl / aws-ofi-rccl plugin",
    "socket": "TCP sockets (no fabric expected)",
    "": "not stated",
}


def split_bind(bind: str) -> tuple[str, str]:
    """``HOST[:TARGET]`` as (host path, path inside the container)."""
    host, _, target = bind.partition(":")
    return host, target or host


def check_binds(value: list[str]) -> str | None:
    """Why a ``fabric.binds`` list is invalid, or None."""
    for item in value:
        host, target = split_bind(item)
        if not host.startswith("/") or not target.startswith("/"):
            return f"'{item}' is not HOST or HOST:TARGET with absolute paths"
        if "," in item or item.count(":") > 1 or any(c.isspace() for c in item):
            return f"'{item}' contains ',', a second ':' or whitespace"
    return None


def check_library_paths(value: list[str]) -> str | None:
    """Why a ``fabric.library_paths`` list is invalid, or None."""
    for item in value:
        if not item.startswith("/") or ":" in item or any(c.isspace() for c in item):
            return f"'{item}' is not an absolute directory (no ':' or whitespace)"
    return None


def fabric_binds(profile: SiteProfile) -> tuple[str, ...]:
    """The binds as written, for ``ddpimg sbatch`` (apptainer ``--bind``, docker ``-v``)."""
    return profile.fabric.binds


def explain_fabric(profile: SiteProfile) -> list[str]:
    """Lines for ``ddpimg env --explain``: the expected transport, binds, variables, library
    paths, bandwidth floor and the image flavour of the site's GPUs."""
    fabric = profile.fabric
    lines = [f"fabric: transport {fabric.transport or '-'} ({TRANSPORT_WORDS[fabric.transport]})"]
    for bind in fabric.binds:
        host, target = split_bind(bind)
        where = target if target == host else f"{target} (from host {host})"
        lines.append(f"fabric: bind {where}: must exist inside the container at train start")
    lines += [f"fabric: {name}={value} (fabric.env)" for name, value in fabric.env]
    lines += [f"fabric: LD_LIBRARY_PATH gets {path}" for path in fabric.library_paths]
    if fabric.min_busbw_gbps:
        lines.append(
            f"fabric: ddpimg doctor expects >= {fabric.min_busbw_gbps:g} GB/s bus bandwidth "
            "across nodes"
        )
    hardware = profile.hardware
    if hardware.build:
        gpus = f"{hardware.gpus} ({hardware.arch})" if hardware.arch else hardware.gpus
        lines.append(f"hardware: {gpus or 'GPUs'} need the {hardware.build} image flavour")
    return lines


def flavour_tags(image_tags: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Flavour name -> the distinctive part of its image tag (``gpu-cu128``), for
    :func:`image_flavour`: the tag after the repository's ``:``."""
    return {name: tag.rpartition(":")[2] for name, tag in image_tags}


def image_flavour(image: str, tags: dict[str, str]) -> str | None:
    """Which flavour an image reference looks like, by a heuristic: its last path component
    (``ddp-gpu-cu128.sif``, ``ddpimg:gpu-cu128``) contains a flavour's tag; the longest tag
    wins (``gpu-cu128`` over ``gpu``). None when no tag appears: nothing is assumed."""
    name = image.rstrip("/").rpartition("/")[2].lower()
    found = [flavour for flavour, tag in tags.items() if tag and tag.lower() in name]
    if not found:
        return None
    return max(found, key=lambda flavour: len(tags[flavour]))
