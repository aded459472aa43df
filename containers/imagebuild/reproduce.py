"""The image made reproducible after its build, and two images compared file by file.

    python3 -m containers.imagebuild.reproduce normalise LAYERED TAG --epoch SECONDS
    python3 -m containers.imagebuild.reproduce compare IMAGE_A IMAGE_B

``normalise``: the file system of LAYERED (the image as the builder layered it), written as
one canonical layer with a canonical config (rootfs.py) and tagged TAG; prints the image's
digest (its config's SHA-256: the image ID of Docker's own image store, the config digest
of a registry's manifest). ``compare``: the files (and config settings) that differ between
two images, for `nox -s image-repro`; exit status 1 when any does. Both need a Docker engine
(the `docker` client on PATH) and run from the repository root, with the standard library
only.

How the image is made, in one pass over its files: `docker export` of a container created
from LAYERED streams the file system, rootfs.canonical_chunks rewrites it, `docker import`
registers it as a layer (whose diff ID is the SHA-256 of exactly those bytes), and
`docker load` of an archive holding only the canonical config and a manifest makes the
image: the engine has the layer already, so Docker's own image store (every engine up to
Docker 28, and later ones without the containerd image store) reads no layer file. An
engine that does want the layer file gets a full archive instead (one more pass).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from .rootfs import (
    BLOCK,
    CONTAINER_ONLY,
    RUNTIME_PATHS,
    RUNTIME_SETTINGS,
    ForwardReader,
    ImageArchiveError,
    canonical_chunks,
    canonical_config,
    normalise_name,
    padded,
    write_chunks,
)

LAYER_MEMBER = "layer.tar"


class EngineError(RuntimeError):
    """A `docker` command failed."""


def docker(*args: str, stdin: IO[bytes] | None = None) -> str:
    """`docker ARGS` (its standard output); EngineError when it fails."""
    proc = subprocess.run(["docker", *args], stdin=stdin, capture_output=True, check=False)
    if proc.returncode != 0:
        error = proc.stderr.decode(errors="replace").strip()
        raise EngineError(f"`docker {' '.join(args[:2])}` failed: {error}")
    return proc.stdout.decode(errors="replace").strip()


def inspect(image: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = json.loads(docker("image", "inspect", image))
    return found[0]


@contextlib.contextmanager
def exported(image: str) -> Iterator[IO[bytes]]:
    """The `docker export` stream of a container created (never started) from ``image``;
    the entrypoint named only because an image without ENTRYPOINT or CMD needs one."""
    container = docker("create", "--entrypoint", "/bin/true", image)
    try:
        with subprocess.Popen(["docker", "export", container], stdout=subprocess.PIPE) as proc:
            assert proc.stdout is not None
            yield proc.stdout
        if proc.returncode != 0:
            raise EngineError(f"`docker export` of {image} failed (exit status {proc.returncode})")
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=False)


def _member(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    return info.tobuf(tarfile.PAX_FORMAT)


def _small_member(out: IO[bytes], name: str, data: bytes) -> None:
    out.write(_member(name, len(data)))
    out.write(data + b"\0" * (padded(len(data)) - len(data)))


def write_config_archive(
    config: bytes, tag: str, out: IO[bytes], layer: Path | None = None
) -> None:
    """Write to ``out`` a `docker load` archive of the image whose config is ``config``,
    tagged ``tag``: the config, manifest.json, and the layer file ``layer`` if given."""
    digest = hashlib.sha256(config).hexdigest()
    if layer is not None:
        size = layer.stat().st_size
        out.write(_member(LAYER_MEMBER, size))
        with layer.open("rb") as source:
            while chunk := source.read(1 << 20):
                out.write(chunk)
        out.write(b"\0" * (padded(size) - size))
    _small_member(out, f"{digest}.json", config)
    manifest = [{"Config": f"{digest}.json", "RepoTags": [tag], "Layers": [LAYER_MEMBER]}]
    _small_member(out, "manifest.json", json.dumps(manifest).encode())
    out.write(b"\0" * (2 * BLOCK))


def load(config: bytes, tag: str, layer: Path | None = None) -> None:
    """`docker load` the image of ``config`` as ``tag`` (write_config_archive)."""
    with tempfile.TemporaryFile() as archive:
        write_config_archive(config, tag, archive, layer)
        archive.seek(0)
        docker("load", "--quiet", stdin=archive)


def import_layer(chunks: Iterator[bytes]) -> tuple[str, str]:
    """`docker import` the tar of ``chunks``: the imported image's ID, and the SHA-256 of the
    bytes streamed (the layer's diff ID, if the engine keeps them as they are)."""
    proc = subprocess.Popen(
        ["docker", "import", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        with proc.stdin:
            diff_id, _ = write_chunks(chunks, proc.stdin)
    except BrokenPipeError:
        diff_id = ""
    imported = proc.stdout.read().decode(errors="replace").strip()
    if proc.wait() != 0 or not diff_id:
        raise EngineError(f"`docker import` failed (exit status {proc.returncode})")
    return imported, diff_id


def normalise(layered: str, tag: str, epoch: int, work: Path | None = None) -> str:
    """Make ``tag`` the one-layer image of ``layered``'s files at ``epoch``; its digest."""
    settings = inspect(layered)
    with exported(layered) as stream:
        imported, diff_id = import_layer(canonical_chunks(stream, epoch))
    try:
        config = canonical_config(settings, diff_id, epoch)
        digest = f"sha256:{hashlib.sha256(config).hexdigest()}"
        layers = inspect(imported)["RootFS"]["Layers"]
        if layers != [diff_id]:
            raise EngineError(f"`docker import` changed the layer: {layers} != {diff_id}")
        try:
            load(config, tag)
        except EngineError:
            # An engine that wants the layer's file with its config (the containerd store).
            with tempfile.TemporaryDirectory(dir=work) as directory:
                layer = Path(directory) / LAYER_MEMBER
                with exported(layered) as stream, layer.open("wb") as out:
                    write_chunks(canonical_chunks(stream, epoch), out)
                load(config, tag, layer)
    finally:
        subprocess.run(["docker", "image", "rm", imported], capture_output=True, check=False)
    if inspect(tag)["Id"] != digest:
        raise EngineError(f"{tag} is not the image loaded ({digest})")
    return digest


@dataclasses.dataclass(frozen=True)
class FileFacts:
    """What two images' files are compared by."""

    kind: str
    mode: int
    owner: tuple[int, int]
    size: int
    link: str
    content: str  # SHA-256 of a file's data
    mtime: int
    xattrs: tuple[tuple[str, str], ...]


_KINDS = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "directory",
          tarfile.SYMTYPE: "link", tarfile.LNKTYPE: "hard link", tarfile.CHRTYPE: "device",
          tarfile.BLKTYPE: "device", tarfile.FIFOTYPE: "fifo"}  # fmt: skip


def file_facts(stream: IO[bytes]) -> dict[str, FileFacts]:
    """Every path of an exported file system and its facts (contents hashed); the times of
    what the exporting container made (rootfs.RUNTIME_PATHS) left out, as the container's
    marker file."""
    facts: dict[str, FileFacts] = {}
    reader: Any = ForwardReader(stream)  # what tarfile reads a file through
    with tarfile.open(fileobj=reader, mode="r:") as archive:
        for info in archive:
            path = normalise_name(info.name)
            if not path or path in CONTAINER_ONLY:
                continue
            content = ""
            if info.isreg():
                digest = hashlib.sha256()
                source = archive.extractfile(info)
                assert source is not None
                while chunk := source.read(1 << 20):
                    digest.update(chunk)
                content = digest.hexdigest()
            facts[path] = FileFacts(
                kind=_KINDS.get(info.type, "other"),
                mode=info.mode & 0o7777,
                owner=(info.uid, info.gid),
                size=info.size if info.isreg() else 0,
                link=info.linkname if info.issym() or info.islnk() else "",
                content=content,
                mtime=0 if path in RUNTIME_PATHS else int(info.mtime),
                xattrs=tuple(sorted((k, v) for k, v in info.pax_headers.items() if "xattr" in k)),
            )
    return facts


def differences(a: Mapping[str, FileFacts], b: Mapping[str, FileFacts]) -> list[str]:
    """One line per path that differs: only in one image, or which facts differ."""
    lines = [f"only in the first: /{path}" for path in sorted(a.keys() - b.keys())]
    lines += [f"only in the second: /{path}" for path in sorted(b.keys() - a.keys())]
    for path in sorted(a.keys() & b.keys()):
        first, second = dataclasses.asdict(a[path]), dataclasses.asdict(b[path])
        fields = [name for name in first if first[name] != second[name]]
        if fields:
            lines.append(f"{', '.join(fields)} differ: /{path}")
    return lines


def settings_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The config settings (RUNTIME_SETTINGS, platform, created) that differ between two
    images (`docker image inspect` objects)."""
    lines = []
    for key in ("Architecture", "Os", "Variant", "Created"):
        if a.get(key) != b.get(key):
            lines.append(f"{key} differs: {a.get(key)!r} != {b.get(key)!r}")
    first, second = a.get("Config") or {}, b.get("Config") or {}
    for key in RUNTIME_SETTINGS:
        if first.get(key) != second.get(key):
            lines.append(f"config {key} differs: {first.get(key)!r} != {second.get(key)!r}")
    return lines


def compare_images(first: str, second: str) -> list[str]:
    """What differs between the images ``first`` and ``second`` (tags or IDs)."""
    lines = settings_differences(inspect(first), inspect(second))
    with exported(first) as stream:
        a = file_facts(stream)
    with exported(second) as stream:
        b = file_facts(stream)
    return lines + differences(a, b)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m containers.imagebuild.reproduce")
    commands = parser.add_subparsers(dest="command", required=True)
    norm = commands.add_parser("normalise", help="make TAG the reproducible image of LAYERED")
    norm.add_argument("layered")
    norm.add_argument("tag")
    norm.add_argument("--epoch", type=int, required=True, help="SOURCE_DATE_EPOCH")
    comp = commands.add_parser("compare", help="the files that differ between two images")
    comp.add_argument("first")
    comp.add_argument("second")
    args = parser.parse_args(argv)
    try:
        if args.command == "normalise":
            print(normalise(args.layered, args.tag, args.epoch))
            return 0
        lines = compare_images(args.first, args.second)
    except (EngineError, ImageArchiveError) as err:
        print(f"reproduce: error: {err}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
