"""What an add-on says about itself, at the root of its squashfs: ``addon.json`` (name,
package set, packages, requirements, the lock's sha256), ``package-set`` (the identity alone,
for the start-up hook, which parses no JSON) and ``NAME.lock`` (the lock it was built from).

Layout of an add-on (mounted at ``/opt/ddpimg/addons/NAME``)::

    addon.json  package-set  NAME.lock
    site-packages/    the packages, byte-compiled (hash-checked .pyc)
    bin/              their console scripts, if any (not on PATH: python -m works)

A mounted add-on may come from anyone: ``read_info`` reads its JSON within bounds and checks
every field's type before use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpimg.addon.errors import AddonError
from ddpimg.addon.lockfile import Lock
from ddpimg.addon.sitepath import PACKAGE_SET_FILE, valid_name
from ddpimg.errors import printable
from ddpimg.untrusted import BadInput, read_json

METADATA = "addon.json"
SCHEMA = 1
METADATA_LIMIT = 1 << 20
BIN_DIR = "bin"
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class AddonInfo:
    name: str
    package_set: str
    interpreter: str
    image: str
    packages: dict[str, str]
    requirements: tuple[str, ...]
    lock_sha256: str

    @classmethod
    def from_lock(cls, lock: Lock, lock_sha256: str) -> AddonInfo:
        return cls(
            name=lock.name,
            package_set=lock.package_set,
            interpreter=lock.interpreter,
            image=lock.image,
            packages={item.name: item.version for item in lock.packages},
            requirements=lock.requirements,
            lock_sha256=lock_sha256,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "name": self.name,
            "package_set": self.package_set,
            "interpreter": self.interpreter,
            "image": self.image,
            "packages": dict(sorted(self.packages.items())),
            "requirements": list(self.requirements),
            "lock_sha256": self.lock_sha256,
        }

    def package_words(self) -> str:
        """``einops 0.8.2, timm 1.0.31``."""
        return ", ".join(f"{name} {version}" for name, version in sorted(self.packages.items()))


def write_info(root: Path, info: AddonInfo, lock_text: str) -> None:
    """The add-on's own files at the root of its tree."""
    import json

    (root / METADATA).write_text(
        json.dumps(info.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    (root / PACKAGE_SET_FILE).write_text(info.package_set + "\n", encoding="ascii")
    (root / f"{info.name}.lock").write_text(lock_text, encoding="utf-8")


def read_info(directory: Path) -> AddonInfo:
    """The ``addon.json`` of a mounted or unpacked add-on; AddonError naming the directory
    for anything that is not one."""
    path = directory / METADATA
    where = printable(str(directory))
    try:
        document = read_json(path, METADATA_LIMIT)
    except (OSError, BadInput) as err:
        why = err.strerror if isinstance(err, OSError) else str(err)
        raise AddonError(
            f"{where} is no add-on: its {METADATA} cannot be read ({why})",
            hint="mount only files that ddpimg addon build made",
        ) from err
    fields = (
        ("name", str),
        ("package_set", str),
        ("interpreter", str),
        ("image", str),
        ("packages", dict),
        ("requirements", list),
        ("lock_sha256", str),
    )
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise AddonError(
            f"{where}: {METADATA} is not an add-on description of schema {SCHEMA}",
            hint="build the add-on again with this ddpimg",
        )
    for key, kind in fields:
        if not isinstance(document.get(key), kind):
            raise AddonError(
                f"{where}: {METADATA}: '{key}' is missing or not a {kind.__name__}",
                hint="mount only files that ddpimg addon build made",
            )
    packages = document["packages"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in packages.items()):
        raise AddonError(
            f"{where}: {METADATA}: 'packages' must map names to versions",
            hint="mount only files that ddpimg addon build made",
        )
    if not valid_name(document["name"]) or not _HEX64.match(document["package_set"]):
        raise AddonError(
            f"{where}: {METADATA}: a name {printable(document['name'][:80])!r} or package set "
            "that no add-on has",
            hint="mount only files that ddpimg addon build made",
        )
    return AddonInfo(
        name=document["name"],
        package_set=document["package_set"],
        interpreter=document["interpreter"],
        image=document["image"],
        packages=dict(packages),
        requirements=tuple(str(text) for text in document["requirements"]),
        lock_sha256=document["lock_sha256"],
    )
