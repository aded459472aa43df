"""An image's file system, written as one canonical tar: the same bytes for the same files.

Why: Docker 20.10's classic builder (Debian 12's docker.io) writes each layer's tar with the
file times of the build, and each config with the clock's ``created`` times and a random
``container`` ID, so two builds of one commit never have one digest; BuildKit's
``SOURCE_DATE_EPOCH`` and ``rewrite-timestamp`` need BuildKit 0.13, which that engine lacks.
So whichever engine built it, the image's file system is read back (`docker export` of a
container created from it: the layers already merged, whiteouts applied, in a sorted walk)
and written as one tar whose bytes depend on the files alone:

- entries in sorted path order (parents first), as the export walks them;
- every time SOURCE_DATE_EPOCH: a cached layer's old times and a fresh one's new times
  become the same (BuildKit's rewrite-timestamp only clamps newer times, which leaves a
  cached layer's older ones as they were);
- owners by number only (no user or group names, which come from the exporting host's
  /etc/passwd), no access or change times, extended attributes sorted, nothing else of the
  exporter's PAX records;
- a hard link names the first path of its file, which holds the data;
- /.dockerenv, which only the exporting container has, dropped. Docker's runtime files
  (/etc/hostname, /etc/hosts, /etc/resolv.conf, /etc/mtab, /dev/console) are as every
  container and every `enroot import dockerd://` has them: empty, or the link Docker makes
  (the base's versions would hold the host that made it: a local debootstrap base has the
  build machine's resolv.conf).

``canonical_config`` keeps the config's runtime settings (user, environment, entrypoint,
labels, ...) with ``created`` at the epoch and one history entry; nothing of the build (parent
image IDs, container IDs, the engine's version). The image's digest is then a function of its
files and settings, on every engine that builds the same files (reproduce.py loads it).
Only the standard library: `python3 -m containers.imagebuild.reproduce` runs anywhere.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import IO, Any, Final

BLOCK = tarfile.BLOCKSIZE
# The tar header format of the canonical layer: PAX keeps long names, large files and
# extended attributes exact; Python writes its headers the same way for the same entry.
FORMAT: Final = tarfile.PAX_FORMAT
ENCODING = "utf-8"
END = b"\0" * (2 * BLOCK)
# What only the exporting container has (Docker's marker of running in Docker).
CONTAINER_ONLY = frozenset({".dockerenv"})
# What the exporting container's init layer makes, with the time of its creation (moby's
# daemon/initlayer): Docker's runtime files and directories, and the directories above them.
RUNTIME_PATHS = frozenset({
    "dev", "dev/console", "dev/pts", "dev/shm", "etc", "etc/hostname", "etc/hosts",
    "etc/mtab", "etc/resolv.conf", "proc", "sys",
})  # fmt: skip
# The config's runtime settings that the image keeps; the rest of a builder's config (the
# parent's ID, the build container's hostname and ID, the engine's version) goes.
RUNTIME_SETTINGS = (
    "User", "ExposedPorts", "Env", "Entrypoint", "Cmd", "Volumes", "WorkingDir", "Labels",
    "StopSignal", "Shell", "Healthcheck", "OnBuild",
)  # fmt: skip
XATTR_PREFIX = "SCHILY.xattr."
HISTORY = "the files of containers/Dockerfile's build as one layer (containers/imagebuild)"
_CHUNK = 1 << 20

# A mode for an entry of the canonical tar, given its header (the exporter's mode in it).
ModeAdjust = Callable[[tarfile.TarInfo], int]


class ImageArchiveError(ValueError):
    """An exported file system that is not what this module reads."""


@dataclass(frozen=True)
class ExtraFile:
    """A regular file to add (or put in place of one the image has), owned by root."""

    path: str  # relative, as in the tar: "etc/rc"
    data: bytes
    mode: int = 0o644


def normalise_name(name: str) -> str:
    """A member's path without leading "./" or "/" and trailing "/" ("" for the root)."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ImageArchiveError(f"member {name!r} leaves the root")
    return "/".join(parts)


def sort_key(path: str) -> list[str]:
    """Parents before their children, siblings by name: the order of Docker's export walk."""
    return path.split("/")


def padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _header(info: tarfile.TarInfo) -> bytes:
    return info.tobuf(FORMAT, ENCODING, "surrogateescape")


def canonical_info(
    old: tarfile.TarInfo, path: str, epoch: int, adjust: ModeAdjust | None
) -> tarfile.TarInfo:
    """The canonical header of ``old`` (as exported) at ``path``."""
    info = tarfile.TarInfo(path)
    info.type = old.type
    info.mode = old.mode & 0o7777
    if adjust is not None:
        info.mode = adjust(info)
    info.uid, info.gid = old.uid, old.gid
    info.uname = info.gname = ""
    info.mtime = epoch
    if old.issym() or old.islnk():
        info.linkname = normalise_name(old.linkname) if old.islnk() else old.linkname
    if old.ischr() or old.isblk():
        info.devmajor, info.devminor = old.devmajor, old.devminor
    if old.isreg():
        info.size = old.size
    xattrs = {k: v for k, v in old.pax_headers.items() if k.startswith(XATTR_PREFIX)}
    info.pax_headers = dict(sorted(xattrs.items()))
    return info


def _extra_header(extra: ExtraFile, epoch: int) -> bytes:
    info = tarfile.TarInfo(extra.path)
    info.size, info.mode, info.mtime = len(extra.data), extra.mode, epoch
    return _header(info)


class ForwardReader:
    """A pipe as tarfile's random-access mode reads a file: ``read``, ``tell`` and ``seek``
    forward only (skipping is reading). tarfile's stream mode ("r|") copies its whole buffer
    on every read (``tarfile._Stream``): a third of the rewrite's CPU time on the cpu image,
    which this mode does not spend, the member's data being read straight from the pipe."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._position = 0

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._position += len(data)
        return data

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 1:
            offset += self._position
        elif whence != 0:
            raise ImageArchiveError("a tar export cannot be read from its end")
        if offset < self._position:
            raise ImageArchiveError(f"a tar export cannot be read backwards (to byte {offset})")
        while self._position < offset:
            skipped = self._raw.read(min(offset - self._position, _CHUNK))
            if not skipped:
                break  # tarfile finds the end itself, as at the end of a file
            self._position += len(skipped)
        return self._position


def canonical_chunks(
    exported: IO[bytes],
    epoch: int,
    adjust: ModeAdjust | None = None,
    extra: Iterable[ExtraFile] = (),
    keep: Callable[[str], bool] | None = None,
) -> Iterator[bytes]:
    """The canonical tar of the file system `docker export` writes to ``exported``, in
    chunks, read and written in one pass. ``adjust`` gives each entry's mode (default: its
    own); ``keep`` drops the paths it refuses; ``extra`` files are added in their sorted place
    (in place of a path the image has). ImageArchiveError if the export is not sorted."""
    added = sorted(extra, key=lambda file: sort_key(file.path))
    previous: list[str] | None = None
    reader: Any = ForwardReader(exported)  # what tarfile reads a file through
    with tarfile.open(fileobj=reader, mode="r:", encoding=ENCODING) as archive:
        for member in archive:
            path = normalise_name(member.name)
            if not path or path in CONTAINER_ONLY or (keep is not None and not keep(path)):
                continue
            key = sort_key(path)
            if previous is not None and key <= previous:
                raise ImageArchiveError(f"the export is not in sorted order at {path!r}")
            previous = key
            replaced = False
            while added and sort_key(added[0].path) <= key:
                file = added.pop(0)
                yield _extra_header(file, epoch)
                yield file.data + b"\0" * (padded(len(file.data)) - len(file.data))
                replaced = file.path == path
            if replaced:
                continue
            info = canonical_info(member, path, epoch, adjust)
            yield _header(info)
            if member.isreg() and member.size:
                source = archive.extractfile(member)
                assert source is not None  # a regular file
                left = member.size
                while left:
                    chunk = source.read(min(left, _CHUNK))
                    if not chunk:
                        raise ImageArchiveError(f"the export ends inside {path!r}")
                    yield chunk
                    left -= len(chunk)
                yield b"\0" * (padded(member.size) - member.size)
    for file in added:
        yield _extra_header(file, epoch)
        yield file.data + b"\0" * (padded(len(file.data)) - len(file.data))
    yield END


def write_chunks(chunks: Iterable[bytes], out: IO[bytes]) -> tuple[str, int]:
    """Write ``chunks`` to ``out``; their SHA-256 ("sha256:HEX": a layer's diff ID) and size."""
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks:
        digest.update(chunk)
        out.write(chunk)
        size += len(chunk)
    return f"sha256:{digest.hexdigest()}", size


def iso_date(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def canonical_config(config: Mapping[str, Any], diff_id: str, epoch: int) -> bytes:
    """The config of the one-layer image: ``config``'s platform and runtime settings (as
    `docker image inspect` shows them: Architecture, Os, Variant, Config), the layer
    ``diff_id``, ``created`` at ``epoch``; serialised with sorted keys."""
    settings = config.get("Config") or {}
    kept = {key: settings[key] for key in RUNTIME_SETTINGS if settings.get(key)}
    created = iso_date(epoch)
    image: dict[str, Any] = {
        "architecture": config["Architecture"],
        "os": config["Os"],
        "config": kept,
        "created": created,
        "history": [{"created": created, "created_by": HISTORY}],
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    if config.get("Variant"):
        image["variant"] = config["Variant"]
    return json.dumps(image, sort_keys=True, separators=(",", ":")).encode()
