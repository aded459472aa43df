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

from collections.abc import Mapping

from ddpimg.imagenames import ImageNames
from ddpimg.site.model import SiteProfile

TRANSPORTS = ("", "ib", "ofi", "socket")
# Variables of [fabric.env] that only a job of several nodes gets. NCCL_NET forces NCCL onto
# the network plugin even between the GPUs of one node, which on Slingshot allocates a VNI
# for nothing and is slower (HPE, https://github.com/HewlettPackard/shs-ccl-docs, ccl_env.sh).
MULTINODE_ONLY = ("NCCL_NET",)
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


def fabric_env(profile: SiteProfile, num_nodes: int) -> tuple[dict[str, str], list[str]]:
    """The [fabric.env] variables a job of ``num_nodes`` nodes gets, and a note for each one
    left out (:data:`MULTINODE_ONLY` on one node)."""
    exports = dict(profile.fabric.env)
    notes = []
    if num_nodes == 1:
        for name in MULTINODE_ONLY:
            if name in exports:
                notes.append(f"fabric: {name} not set on one node (fabric.env; multi-node only)")
                del exports[name]
    return exports, notes


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


def image_flavour(image: str, names: Mapping[str, ImageNames]) -> str | None:
    """Which flavour an image reference looks like, by a heuristic on its last path
    component (``ddp-cu128.sif``, ``ddpimg:gpu-cu128``, ``ddpimg+gpu.sqsh``): it is one of a
    flavour's file names, or it contains the part of a flavour's tag after ``:``
    (``gpu-cu128``); the longest match wins (``gpu-cu128`` over ``gpu``). None when nothing
    matches: nothing is assumed."""
    last = image.rstrip("/").rpartition("/")[2].lower()
    scores: dict[str, int] = {}
    for flavour, known in names.items():
        if last in (known.sif.lower(), known.sqsh.lower(), known.tag.lower()):
            return flavour
        tag = known.tag.rpartition(":")[2].lower()
        if tag and tag in last:
            scores[flavour] = len(tag)
    return max(scores, key=lambda flavour: scores[flavour]) if scores else None
