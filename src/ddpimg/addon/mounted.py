"""Run time: the add-ons mounted here (``/opt/ddpimg/addons/NAME``, or ``$DDPIMG_ADDON_ROOT``),
checked before a rank meets the others and recorded in every run's manifest.

``check_addons`` runs at the start of ``train`` and ``ddpimg doctor`` on every rank (and in
the launcher of ``--nproc-per-node``), before any rendezvous, and refuses with exit status 2
and one line: an add-on made for another package set (naming both), one that is no add-on,
two add-ons that hold the same package, or add-ons this environment's Python would not see
(no start-up hook). With nothing mounted it costs one ``listdir``.

The sha256 of each add-on's file is not visible from inside a mount: whoever mounts it says
it in ``DDPIMG_ADDONS`` (``NAME=SHA256,...``: the batch script ``ddpimg sbatch`` renders
computes it at the job's start, ``ddpimg addon image`` writes it into the image), and the
manifest records it (``null`` when nobody said).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpimg.addon import sitepath
from ddpimg.addon.errors import AddonError
from ddpimg.addon.metadata import AddonInfo, read_info
from ddpimg.errors import printable

DIGESTS_VARIABLE = "DDPIMG_ADDONS"
MAX_DIGESTS_LENGTH = 64 * 1024
_DIGEST = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]{0,63})=([0-9a-f]{64})\Z")


@dataclass(frozen=True)
class Mounted:
    """An add-on found mounted: its directory's name and path, what it says about itself
    (None when it cannot be read: ``problem`` says why), and its file's sha256 if told."""

    name: str
    path: str
    info: AddonInfo | None
    problem: str
    sha256: str | None

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"name": self.name, "path": self.path, "sha256": self.sha256}
        if self.info is None:
            return record | {"error": self.problem}
        return record | {
            "packages": dict(sorted(self.info.packages.items())),
            "package_set": self.info.package_set,
            "lock_sha256": self.info.lock_sha256,
        }


def digests(env: Mapping[str, str]) -> dict[str, str]:
    """{name: sha256} from ``DDPIMG_ADDONS``; malformed entries are ignored (the manifest
    then records no sha256 for them)."""
    text = env.get(DIGESTS_VARIABLE, "")[:MAX_DIGESTS_LENGTH]
    found: dict[str, str] = {}
    for entry in text.split(","):
        match = _DIGEST.match(entry.strip())
        if match is not None:
            found[match.group(1)] = match.group(2)
    return found


def mounted_addons(env: Mapping[str, str]) -> list[Mounted]:
    """Every add-on under the add-on root, by name."""
    found = sitepath.mounted(sitepath.addon_root(dict(env)))
    if not found:
        return []
    told = digests(env)
    out: list[Mounted] = []
    for name, path in found:
        try:
            info: AddonInfo | None = read_info(Path(path))
            problem = ""
        except AddonError as err:
            info, problem = None, err.message
        out.append(Mounted(name, path, info, problem, told.get(name)))
    return out


def addon_records(env: Mapping[str, str]) -> list[dict[str, Any]]:
    """What manifest.json records: each add-on's name, sha256, packages and package set."""
    return [addon.to_json() for addon in mounted_addons(env)]


def check_addons(env: Mapping[str, str]) -> list[Mounted]:
    """The add-ons mounted here, each fit for this environment; AddonError (one line: no
    hint) for the first that is not."""
    addons = mounted_addons(env)
    if not addons:
        return []
    root = sitepath.addon_root(dict(env))
    identity, facts, packages = sitepath.current_package_set(root)
    owners: dict[str, str] = {}
    for addon in addons:
        where = f"add-on {addon.name} ({printable(addon.path)})"
        if addon.info is None:
            raise AddonError(
                f"{where} cannot be used: {addon.problem}; mount only files that ddpimg addon "
                "build made"
            )
        if addon.info.package_set != identity:
            raise AddonError(
                f"{where} was made for package set {addon.info.package_set[:12]} "
                f"({addon.info.interpreter}; {addon.info.image or 'no image named'}), but this "
                f"image's is {identity[:12]} (python {facts['python']}, {facts['platform']}, "
                f"{len(packages)} packages): build it again in this image with ddpimg addon "
                f"build --lock {addon.name}.lock, or run the image it was made for"
            )
        for package in addon.info.packages:
            if package in owners:
                raise AddonError(
                    f"{where} and add-on {owners[package]} both hold {package}: Python would "
                    "import one of them; mount one, or build one add-on from both requirements"
                )
            owners[package] = addon.name
    if sitepath.HOOK_MODULE not in sys.modules:
        raise AddonError(
            f"add-ons are mounted at {printable(root)}, but this Python environment "
            f"({printable(sys.prefix)}) has no add-on start-up hook, so its Python would not "
            "see them: run ddpimg addon install-hook in it once (ddpimg's images have it)"
        )
    return addons


def explain_lines(env: Mapping[str, str]) -> list[str]:
    """``ddpimg env --explain`` and ``ddpimg doctor``: one line an add-on (none mounted: one
    line saying so where the add-on root exists, as in ddpimg's images)."""
    root = sitepath.addon_root(dict(env))
    addons = mounted_addons(env)
    if not addons:
        return [f"add-ons: none mounted at {printable(root)}"] if os.path.isdir(root) else []
    identity = sitepath.current_package_set(root)[0]
    lines = []
    for addon in addons:
        head = f"add-on {addon.name} at {printable(addon.path)}"
        if addon.info is None:
            lines.append(f"{head}: unusable ({addon.problem})")
            continue
        fits = (
            "made for this image's package set"
            if addon.info.package_set == identity
            else f"made for ANOTHER package set ({addon.info.package_set[:12]}, this image's "
            f"is {identity[:12]}): refused"
        )
        digest = f"sha256 {addon.sha256[:16]}..." if addon.sha256 else "sha256 not told"
        lines.append(f"{head}: {addon.info.package_words()}; {digest}; {fits}")
    return lines
