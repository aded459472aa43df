"""The package set of the running Python environment: what an add-on is locked against and
made for (``ddpimg.addon.sitepath`` lists it and computes its identity; this module gives
it a shape, words for messages and the constraints pip resolves under)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddpimg.addon import sitepath

SHORT_ID = 12


@dataclass(frozen=True)
class PackageSet:
    """``identity`` (sha256 hex) over ``interpreter`` (python, implementation, platform) and
    ``packages`` ({canonical name: version}); ``image``: the image's build facts (flavour,
    lock name and sha256) when this is ddpimg's image, for people only: they are not part of
    the identity, so a rebuilt image with the same packages takes the same add-ons."""

    identity: str
    interpreter: Mapping[str, str]
    packages: Mapping[str, str]
    image: Mapping[str, str]

    @property
    def short(self) -> str:
        return self.identity[:SHORT_ID]

    def describe(self) -> str:
        """``3f2a9c1b0d4e (python 3.11, linux-x86_64, 187 packages; image ddpimg cpu, lock
        cpu f7a6ac416372)``."""
        facts = self.interpreter
        words = f"python {facts['python']}, {facts['platform']}, {len(self.packages)} packages"
        if self.image:
            words += f"; {image_words(self.image)}"
        return f"{self.short} ({words})"

    def version(self, name: str) -> str | None:
        return self.packages.get(sitepath.canonical_name(name))

    def constraints(self) -> str:
        """Every package pinned to its installed version, as a pip constraints file (``===``
        for a version PEP 440 cannot read, which pip compares as a string)."""
        from ddpimg.addon.specs import is_valid_version

        lines = [
            f"{name}=={version}" if is_valid_version(version) else f"{name}==={version}"
            for name, version in sorted(self.packages.items())
        ]
        return "".join(f"{line}\n" for line in lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.identity,
            **dict(self.interpreter),
            "packages": len(self.packages),
            **({"image": dict(self.image)} if self.image else {}),
        }


def image_words(image: Mapping[str, str]) -> str:
    """``image ddpimg cpu, lock cpu f7a6ac416372``."""
    words = f"image ddpimg {image.get('flavour', '?')}"
    if image.get("lock"):
        words += f", lock {image['lock']} {image.get('lock_sha256', '')[:SHORT_ID]}".rstrip()
    return words


def image_facts(env: Mapping[str, str]) -> dict[str, str]:
    """The image's flavour and lock from its build-info file ({} outside ddpimg's image)."""
    from ddpimg.buildinfo import read_build_info

    info = read_build_info(env)
    if not info or "error" in info:
        return {}
    lock = info.get("lock") if isinstance(info.get("lock"), dict) else {}
    facts = {
        "flavour": str(info.get("flavour", "")),
        "lock": str(lock.get("name", "")) if lock else "",
        "lock_sha256": str(lock.get("sha256", "")) if lock else "",
    }
    return {key: value for key, value in facts.items() if value}


def current(env: Mapping[str, str] | None = None) -> PackageSet:
    """The package set of this interpreter's environment."""
    environ = dict(os.environ if env is None else env)
    identity, facts, packages = sitepath.current_package_set(sitepath.addon_root(environ))
    return PackageSet(identity, facts, packages, image_facts(environ))
