"""The image's build record (``/etc/ddpimg/build-info.json``, written by
containers/scripts/build_info.py): read by the manifest, ``ddpimg doctor`` and the add-ons'
package-set facts. A leaf: the standard library and ddpimg's bounded readers only."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddpimg.untrusted import MIB, read_json

BUILD_INFO_VARIABLE = "DDPIMG_BUILD_INFO"
BUILD_INFO_DEFAULT = "/etc/ddpimg/build-info.json"
BUILD_INFO_LIMIT = MIB  # the image's build facts: a few KiB


def read_build_info(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The image's build info (JSON) from ``$DDPIMG_BUILD_INFO`` or the image's default
    path; None outside the image. Never fails: an unreadable file is recorded as an error."""
    path = Path(env.get(BUILD_INFO_VARIABLE) or BUILD_INFO_DEFAULT)
    if not path.exists():
        return None
    try:
        content = read_json(path, BUILD_INFO_LIMIT)
    except (OSError, ValueError) as err:
        return {"path": str(path), "error": f"unreadable: {err}"}
    if not isinstance(content, dict):
        return {
            "path": str(path),
            "error": f"expected a JSON object, found {type(content).__name__}",
        }
    return content


def image_identity(info: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """manifest.json's ``image``: which image the run ran in, at a glance (two runs with one
    ``tree_digest`` ran in the same Python environment and ddpimg): the flavour, the pip and
    Debian locks and the tree digest of its build record (``ddpimg doctor --verify``
    recomputes it); None outside ddpimg's image or with an unreadable record."""
    if info is None or "error" in info:
        return None
    tree = info.get("tree")
    return {
        "flavour": info.get("flavour"),
        "lock": info.get("lock"),
        "apt_lock": info.get("apt_lock"),
        "tree_digest": tree.get("digest") if isinstance(tree, Mapping) else None,
    }
