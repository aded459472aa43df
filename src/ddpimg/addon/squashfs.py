"""Packing an add-on's tree as a squashfs file: the form Apptainer and SingularityCE bind
(``--bind FILE:DIR:image-src=/``), the CSCS Container Engine mounts (an EDF ``:sqsh`` mount),
enroot and podman-hpc's nodes unpack or mount with squashfuse, and one file instead of
thousands on a parallel file system.

Reproducible: squashfs-tools 4.4 and later order files the same way whatever the threads do;
every time (files' and the file system's own) is fixed, owners are root, no extended
attributes, and the tree's permissions were made the same beforehand (``tree.normalise``).
gzip, mksquashfs' default, is what every runtime and kernel reads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ddpimg.addon.errors import AddonError
from ddpimg.addon.sources import SOURCE_DATE_EPOCH
from ddpimg.errors import printable

MKSQUASHFS = "mksquashfs"
PACK_TIMEOUT_S = 1800.0
MAGIC = b"hsqs"  # a squashfs superblock starts with it (little-endian)


def pack_options() -> list[str]:
    return [
        "-noappend", "-no-xattrs", "-all-root", "-all-time", SOURCE_DATE_EPOCH,
        "-mkfs-time", SOURCE_DATE_EPOCH, "-comp", "gzip", "-quiet", "-no-progress",
    ]  # fmt: skip


def find_mksquashfs() -> str:
    found = shutil.which(MKSQUASHFS)
    if found is None:
        raise AddonError(
            "mksquashfs is not on PATH here, and it packs the add-on",
            hint="ddpimg's images have it (squashfs-tools); elsewhere install squashfs-tools, "
            "or build from the host with --image IMAGE",
        )
    return found


def pack(tree: Path, out: Path) -> None:
    """Pack ``tree`` into ``out`` (written beside it under a temporary name, then renamed)."""
    mksquashfs = find_mksquashfs()
    temporary = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    argv = [mksquashfs, str(tree), str(temporary), *pack_options()]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=PACK_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as err:
        temporary.unlink(missing_ok=True)
        raise AddonError(
            f"mksquashfs took more than {PACK_TIMEOUT_S:g} s",
            hint="an add-on is for a few packages",
        ) from err
    if proc.returncode != 0:
        temporary.unlink(missing_ok=True)
        raise AddonError(
            f"mksquashfs failed (status {proc.returncode}) writing {printable(str(out))}: "
            f"{printable((proc.stderr or proc.stdout).strip()[-500:])}",
            hint="check the space and permissions where -o points",
        )
    os.chmod(temporary, 0o644)
    os.replace(temporary, out)


def is_squashfs(path: Path) -> bool:
    """Whether ``path`` is a regular file that starts like a squashfs."""
    from ddpimg.untrusted import BadInput, check_regular

    try:
        check_regular(path)
        with path.open("rb") as stream:
            return stream.read(4) == MAGIC
    except (OSError, BadInput):
        return False
