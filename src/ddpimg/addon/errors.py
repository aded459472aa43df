"""The add-on's user error: exit status 2 (``ddpimg.exitcodes.USAGE``), like every other."""

from __future__ import annotations

from ddpimg.errors import DdpimgError


class AddonError(DdpimgError):
    """An add-on cannot be built, mounted or used as asked: a requirement that would change
    the image's packages, an add-on made for another package set, a file that is no add-on."""
