"""Write the image's build-info file, which every run's ``manifest.json`` records.

Run in the build stage with the image's venv interpreter, after everything is installed:

    python build_info.py --out FILE --flavour cpu --torch-source pypi --lock LOCK \
        --revision REV --base-image IMAGE [--apt-lock FILE --apt-section NAME] \
        [--tree-listing LISTING [--tree-root PATH]...]

The image puts FILE at ``/etc/ddpimg/build-info.json``, where ``ddpimg.train.outputs``
looks by default. The build date comes from ``SOURCE_DATE_EPOCH`` (not the clock), so two
builds of the same inputs write the same file. With ``--tree-listing`` it also walks the
image's Python environment and ddpimg's files (``ddpimg.imagetree``; ``--tree-root``, default
``image_roots()``), writes their listing there and records its digest, the tree digest that
every run's manifest carries and ``ddpimg doctor --verify`` recomputes.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("ddpimg", "torch", "torchvision", "numpy", "deepspeed", "mpi4py")
SCHEMA = 1
# containers/imagebuild/locks.py writes a lock's reasons for departing from its input list
# (another torch, say) as these lines; the build-info file carries them to `ddpimg doctor`.
NOTE_PREFIX = "# note: "
# What DeepSpeed's setup.py writes about the ops it built (``installed_ops={...}``).
DEEPSPEED_BUILD_RECORD = "deepspeed/git_version_info_installed.py"


def build_date(env: Mapping[str, str]) -> str | None:
    """``SOURCE_DATE_EPOCH`` as an ISO 8601 UTC date; None when unset or empty."""
    value = env.get("SOURCE_DATE_EPOCH", "")
    if not value:
        return None
    if not value.isdigit():
        raise ValueError(
            f"SOURCE_DATE_EPOCH={value!r}: expected seconds since 1970 "
            "(e.g. `git log -1 --format=%ct`)"
        )
    when = datetime.fromtimestamp(int(value), timezone.utc)
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def open_mpi_version(text: str) -> str | None:
    """The version in ``mpirun --version`` output ("mpirun (Open MPI) 4.1.4")."""
    match = re.search(r"\(Open MPI\) (\S+)", text)
    return match.group(1) if match else None


def lock_notes(lock: str) -> list[str]:
    """The notes of a lock file's text (NOTE_PREFIX lines), in order."""
    return [
        line[len(NOTE_PREFIX) :].strip()
        for line in lock.splitlines()
        if line.startswith(NOTE_PREFIX)
    ]


def built_ops(record: str) -> list[str]:
    """The DeepSpeed ops built with the package, from its DEEPSPEED_BUILD_RECORD text: the
    names set true in ``installed_ops`` (none built: empty)."""
    for line in record.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "installed_ops":
            ops = ast.literal_eval(value.strip())
            return sorted(op for op, built in ops.items() if built)
    return []


def deepspeed_record() -> str:
    """DeepSpeed's DEEPSPEED_BUILD_RECORD text; empty without DeepSpeed (or the file)."""
    try:
        path = metadata.distribution("deepspeed").locate_file(DEEPSPEED_BUILD_RECORD)
        return Path(str(path)).read_text(encoding="utf-8")
    except (metadata.PackageNotFoundError, OSError):
        return ""


def describe(
    args: argparse.Namespace,
    env: Mapping[str, str],
    versions: Callable[[str], str | None],
    lock_sha256: str,
    mpi: str | None,
    *,
    notes: Sequence[str] = (),
    deepspeed_ops: Sequence[str] = (),
    apt_lock: Mapping[str, str] | None = None,
    tree: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The build-info object. Pure: everything it reports is passed in."""
    return {
        "schema": SCHEMA,
        "image": "ddpimg",
        "flavour": args.flavour,
        "revision": args.revision or None,
        "base_image": args.base_image or None,
        "build_date": build_date(env),
        "source_date_epoch": env.get("SOURCE_DATE_EPOCH") or None,
        "lock": {"name": args.torch_source, "sha256": lock_sha256},
        # Why this image's packages differ from the other flavours' (the lock's notes).
        "notes": list(notes),
        "python": platform.python_version(),
        "machine": platform.machine(),  # the image's CPU: x86_64, aarch64
        "packages": {name: versions(name) for name in PACKAGES},
        "open_mpi": mpi,
        "deepspeed_build_ops": env.get("DS_BUILD_OPS", "0") == "1",
        # The ops DeepSpeed loads as built instead of JIT-compiling them (on the accelerator
        # they were built for: the cpu flavour's for the CPU).
        "deepspeed_ops": list(deepspeed_ops),
        "mpi4py_build": env.get("MPI4PY_BUILD") or "source",
        "torch_cuda_arch_list": env.get("TORCH_CUDA_ARCH_LIST") or None,
        # The Debian packages' lock (containers/lock/apt/NAME.txt) and the stage's section of
        # it that the image's package set equals; None: built without one.
        "apt_lock": dict(apt_lock) if apt_lock else None,
        # The tree digest (ddpimg.imagetree): what `ddpimg doctor --verify` recomputes.
        "tree": dict(tree) if tree else None,
    }


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--flavour", choices=["cpu", "gpu"], required=True)
    parser.add_argument("--torch-source", required=True, help="the lock's name (pypi, cpu, ...)")
    parser.add_argument("--lock", type=Path, required=True)
    parser.add_argument("--revision", default="")
    parser.add_argument("--base-image", default="")
    parser.add_argument("--apt-lock", type=Path, help="the Debian packages' lock file used")
    parser.add_argument("--apt-section", default="", help="its section for this stage")
    parser.add_argument("--tree-listing", type=Path, help="write the tree's listing here")
    parser.add_argument(
        "--tree-root", action="append", default=[], help="a path the tree covers (repeat)"
    )
    return parser.parse_args(argv)


def apt_lock_record(path: Path | None, section: str) -> dict[str, str] | None:
    """The build record's ``apt_lock``: the lock's name (its file's stem), the section and
    the file's SHA-256; None without a lock."""
    if path is None:
        return None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"name": path.stem, "section": section, "sha256": digest}


def write_tree(listing_path: Path, roots: Sequence[str]) -> dict[str, Any]:
    """Walk ``roots``, write their listing to ``listing_path``; the build record's ``tree``."""
    from ddpimg import imagetree

    entries = imagetree.scan(roots)
    listing = imagetree.render(entries)
    listing_path.parent.mkdir(parents=True, exist_ok=True)
    listing_path.write_bytes(listing)
    return {
        "digest": imagetree.tree_digest(listing),
        "listing": str(listing_path),
        "roots": list(roots),
        "entries": len(entries),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    lock = args.lock.read_bytes()
    lock_sha256 = hashlib.sha256(lock).hexdigest()
    tree = None
    if args.tree_listing is not None:
        from ddpimg import imagetree

        tree = write_tree(args.tree_listing, args.tree_root or imagetree.image_roots())
    mpirun = subprocess.run(
        ["mpirun", "--version"], capture_output=True, text=True, check=False, timeout=60
    )
    info = describe(
        args,
        os.environ,
        installed_version,
        lock_sha256,
        open_mpi_version(mpirun.stdout),
        notes=lock_notes(lock.decode("utf-8")),
        deepspeed_ops=built_ops(deepspeed_record()),
        apt_lock=apt_lock_record(args.apt_lock, args.apt_section),
        tree=tree,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
