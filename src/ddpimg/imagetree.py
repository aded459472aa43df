"""The image's tree digest: one SHA-256 over every file of its Python environment and of
ddpimg's own files, written into the build record at build time and recomputed by
``ddpimg doctor --verify``.

The build (``containers/scripts/build_info.py``) walks ``image_roots()`` (``/opt/ddpimg``,
which holds the venv and ddpimg's scripts; the interpreter; its standard library), writes one
line per entry to a listing file (``/etc/ddpimg/tree.txt``) and records the listing's SHA-256,
the tree digest, in ``/etc/ddpimg/build-info.json``; every run's ``manifest.json`` carries it
(``image.tree_digest``). A line is ``KIND MODE DIGEST PATH``: ``f`` a file and its content's
SHA-256, ``l`` a symbolic link and its target's, ``d`` a directory, ``o`` anything else; the
mode's permission bits in octal. Times and owners are left out: a runtime may show other
owners (Apptainer, enroot) and times say nothing about what runs. ``compare`` names what was
added, removed or changed since the build: a ``pip install`` into a writable sandbox, a patched
module.

A leaf module (the standard library only, and the add-on hook's module, a leaf as well,
for where add-ons are mounted): the build script imports it before anything else
of ddpimg could be relied on, and ``ddpimg doctor --verify`` must not import torch.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import sysconfig
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ddpimg.addon.sitepath import ROOT as ADDON_ROOT

LISTING_DEFAULT = "/etc/ddpimg/tree.txt"
DDPIMG_ROOT = "/opt/ddpimg"
# Where runtimes mount add-ons: beside the image, never part of it (docs/addons.md). The
# directory is listed; what is mounted in it is not, so an add-on does not fail --verify.
ADDONS_ROOT = ADDON_ROOT
# A listing of the largest image (the CUDA venv: about 60,000 entries of ~120 bytes) is a few
# MiB; a file many times that is no listing.
LISTING_LIMIT = 64 << 20
_CHUNK = 1 << 20
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}


class ListingError(ValueError):
    """A listing file that is not one ``render`` writes."""


@dataclass(frozen=True, order=True)
class TreeEntry:
    """One line of the listing."""

    path: str
    kind: str  # f, l, d, o
    mode: int  # permission bits
    digest: str = ""  # SHA-256 (hex) of a file's content or a link's target; "" otherwise


@dataclass(frozen=True)
class TreeDiff:
    """What differs between the listing recorded at build time and the tree now."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def image_roots(
    prefix: str = DDPIMG_ROOT,
    executable: str = sys.executable,
    paths: dict[str, str] | None = None,
) -> list[str]:
    """What the tree digest covers: ddpimg's directory (the venv, the scripts), the
    interpreter the venv runs (its link resolved) and the standard library it imports;
    sorted, none inside another."""
    stdlib = paths if paths is not None else sysconfig.get_paths()
    candidates = {prefix, os.path.realpath(executable), stdlib["stdlib"], stdlib["platstdlib"]}
    roots = sorted(os.path.normpath(path) for path in candidates)
    return [root for root in roots if not any(_below(root, other) for other in roots)]


def _below(path: str, root: str) -> bool:
    return path != root and path.startswith(root.rstrip("/") + "/")


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _walk(root: str, unlisted: frozenset[str]) -> Iterator[tuple[str, os.stat_result]]:
    """Every path under ``root`` (``root`` first), links not followed, with its status; the
    contents of the directories in ``unlisted`` left out (the directories themselves not)."""
    status = os.lstat(root)
    yield root, status
    if not stat.S_ISDIR(status.st_mode) or root in unlisted:
        return
    stack = [root]
    while stack:
        directory = stack.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                entry_status = entry.stat(follow_symlinks=False)
                yield entry.path, entry_status
                if stat.S_ISDIR(entry_status.st_mode) and entry.path not in unlisted:
                    stack.append(entry.path)


def scan(
    roots: Iterable[str],
    workers: int | None = None,
    unlisted: Iterable[str] = (ADDONS_ROOT,),
) -> list[TreeEntry]:
    """The entries under ``roots``, sorted by path, but what lies in ``unlisted``
    directories (the add-ons' mount points); files hashed on ``workers`` threads (hashlib
    and reads release the GIL: a node's cores read the venv side by side)."""
    skipped = frozenset(os.path.normpath(path) for path in unlisted)
    found: list[tuple[str, os.stat_result]] = []
    for root in roots:
        found.extend(_walk(os.path.normpath(root), skipped))
    files = [path for path, status in found if stat.S_ISREG(status.st_mode)]
    threads = workers or min(8, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        digests = dict(zip(files, pool.map(_file_digest, files), strict=True))
    entries = []
    for path, status in found:
        mode = stat.S_IMODE(status.st_mode)
        if stat.S_ISREG(status.st_mode):
            entries.append(TreeEntry(path, "f", mode, digests[path]))
        elif stat.S_ISLNK(status.st_mode):
            target = os.fsencode(os.readlink(path))
            entries.append(TreeEntry(path, "l", mode, hashlib.sha256(target).hexdigest()))
        elif stat.S_ISDIR(status.st_mode):
            entries.append(TreeEntry(path, "d", mode))
        else:
            entries.append(TreeEntry(path, "o", mode))
    return sorted(entries)


def _escape(path: str) -> str:
    return "".join(_ESCAPES.get(char, char) for char in path)


def _unescape(text: str) -> str:
    out, chars = [], iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        follower = next(chars, "")
        decoded = {"\\": "\\", "n": "\n", "r": "\r"}.get(follower)
        if decoded is None:
            raise ListingError(f"bad escape \\{follower} in path {text!r}")
        out.append(decoded)
    return "".join(out)


def render(entries: Iterable[TreeEntry]) -> bytes:
    """The listing: one line per entry, ``KIND MODE DIGEST PATH`` (``-`` for no digest)."""
    lines = (
        f"{e.kind} {e.mode:04o} {e.digest or '-'} {_escape(e.path)}\n" for e in sorted(entries)
    )
    return "".join(lines).encode("utf-8", "surrogateescape")


def parse(listing: bytes) -> list[TreeEntry]:
    """The entries of a listing ``render`` wrote; ListingError for anything else."""
    entries = []
    text = listing.decode("utf-8", "surrogateescape")
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split(" ", 3)
        if len(fields) != 4 or fields[0] not in ("f", "l", "d", "o"):
            raise ListingError(
                f"line {number}: expected KIND MODE DIGEST PATH, found {line[:80]!r}"
            )
        kind, mode, digest, path = fields
        try:
            entries.append(
                TreeEntry(_unescape(path), kind, int(mode, 8), "" if digest == "-" else digest)
            )
        except ValueError as err:
            raise ListingError(f"line {number}: {err}") from err
    return entries


def tree_digest(listing: bytes) -> str:
    """The tree digest: the listing's SHA-256, as ``sha256:HEX``."""
    return f"sha256:{hashlib.sha256(listing).hexdigest()}"


def compare(recorded: Sequence[TreeEntry], current: Sequence[TreeEntry]) -> TreeDiff:
    """The paths added, removed and changed (kind, mode or digest) between two listings."""
    before = {entry.path: entry for entry in recorded}
    after = {entry.path: entry for entry in current}
    return TreeDiff(
        added=sorted(after.keys() - before.keys()),
        removed=sorted(before.keys() - after.keys()),
        changed=sorted(
            path for path in before.keys() & after.keys() if before[path] != after[path]
        ),
    )


@dataclass(frozen=True)
class Verification:
    """The tree now against the build record's: both digests, the entries walked, and what
    differs (nothing when the digests agree and the listing is the record's)."""

    recorded: str
    current: str
    entries: int
    roots: list[str]
    diff: TreeDiff
    addons: list[str] = field(default_factory=list)  # what is mounted in ADDONS_ROOT, unlisted

    @property
    def ok(self) -> bool:
        return self.recorded == self.current and not self.diff


def recorded_tree(info: Mapping[str, Any]) -> tuple[str, str, list[str]]:
    """The build record's tree: its digest, listing file and roots; ListingError when the
    record has none (an image built before tree digests) or it is malformed."""
    tree = info.get("tree")
    if not isinstance(tree, Mapping):
        raise ListingError("the build record has no tree digest (an image built before them)")
    digest, listing, roots = tree.get("digest"), tree.get("listing"), tree.get("roots")
    if not (
        isinstance(digest, str)
        and isinstance(listing, str)
        and isinstance(roots, list)
        and all(isinstance(root, str) for root in roots)
    ):
        raise ListingError(f"the build record's tree is malformed: {dict(tree)!r:.200}")
    return digest, listing, roots


def verify(info: Mapping[str, Any], workers: int | None = None) -> Verification:
    """Recompute the tree the build record ``info`` describes and compare it with the
    recorded listing; ListingError or OSError when the record or listing cannot be read."""
    from ddpimg.untrusted import read_bytes

    digest, listing_path, roots = recorded_tree(info)
    listing = read_bytes(listing_path, LISTING_LIMIT)
    recorded = parse(listing)
    current = scan(roots, workers)
    now = tree_digest(render(current))
    diff = compare(recorded, current)
    if tree_digest(listing) != digest and not diff:
        # The listing file itself was edited: name it rather than nothing.
        diff = TreeDiff(changed=[listing_path])
    return Verification(digest, now, len(current), roots, diff, mounted_addons())


def mounted_addons(root: str = ADDONS_ROOT) -> list[str]:
    """The names in the add-ons' directory (what runtimes mounted there), sorted."""
    try:
        return sorted(os.listdir(root))
    except OSError:
        return []
