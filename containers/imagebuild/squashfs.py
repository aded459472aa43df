"""`nox -s sqsh`: an image as the squashfs that enroot runs (pyxis' `srun --container-image`,
the CSCS Container Engine on Alps), written reproducibly: two exports of one image, on any
machine with the same squashfs-tools, have one SHA-256.

    nox -s sqsh -- IMAGE [--output FILE] [--twice]

What `enroot import dockerd://IMAGE` makes (enroot's src/docker.sh, docker::daemon::import and
docker::configure), from the image's own layers instead of a container's export:

- the image's files (rootfs.merge), without the contents of /dev (the runtime's) and with
  enroot's permission fix (owner read, and search on directories and executables; owner
  write on directories), owned by root (`-all-root`);
- the files enroot's runtime reads (its doc/image-format.md): /etc/environment from the
  image's ENV, /etc/rc (working directory, then ENTRYPOINT + CMD, or the command given),
  an empty /etc/rc.local and /etc/fstab (no VOLUME);
- enroot's default compression, ENROOT_SQUASH_OPTIONS `-comp lzo -noD -exit-on-error`.

Reproducible: the canonical tar of rootfs.py (sorted, one time) goes to sqfstar (squashfs-tools
>= 4.5) with every time and the file system's creation time set to the image's ``created``
(SOURCE_DATE_EPOCH for images `nox -s image` made), `-reproducible` (its default), and
`-no-xattrs` (the extraction's host file system would otherwise add its own labels).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from ddpimg.imagenames import names_of_tag

from .reproduce import EngineError, exported, inspect
from .rootfs import ExtraFile, canonical_chunks, write_chunks
from .session import Session

# enroot's default ENROOT_SQUASH_OPTIONS (enroot.in, doc/cmd/import.md).
ENROOT_SQUASH_OPTIONS = ("-comp", "lzo", "-noD", "-exit-on-error")
REPRODUCIBLE_OPTIONS = ("-reproducible", "-no-xattrs", "-all-root", "-no-progress")
SQFSTAR = "sqfstar"
ARGUMENTS = '"$@"'


_CREATED = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)")


def epoch_of(config: Mapping[str, Any]) -> int:
    """The image's ``Created`` time in whole seconds (RFC 3339, as Docker writes it)."""
    created = str(config.get("Created") or "")
    found = _CREATED.fullmatch(created)
    if found is None:
        raise ValueError(f"the image's created time {created!r} is not an RFC 3339 time")
    zone = "+00:00" if found.group(2) == "Z" else found.group(2)
    return int(datetime.fromisoformat(found.group(1) + zone).timestamp())


def enroot_mode(info: tarfile.TarInfo) -> int:
    """enroot's permission fix (common::fixperms): `chmod u+rX`, and u+w on directories."""
    mode = info.mode | 0o400
    if info.isdir():
        mode |= 0o300
    elif mode & 0o111:
        mode |= 0o100
    return mode


def kept(path: str) -> bool:
    """What enroot's extraction keeps: not the contents of /dev, nor /.dockerenv."""
    return not path.startswith("dev/") and path != ".dockerenv"


def rc_script(config: Mapping[str, Any]) -> str:
    """/etc/rc for enroot: enter the working directory, source /etc/rc.local, then run the
    command given (after the ENTRYPOINT) or ENTRYPOINT + CMD (``/bin/sh`` without either)."""
    settings = config.get("Config") or {}
    entrypoint = [shlex.quote(word) for word in settings.get("Entrypoint") or []]
    command = [shlex.quote(word) for word in settings.get("Cmd") or []]
    if not entrypoint and not command:
        command = ["/bin/sh"]
    workdir = shlex.quote(settings.get("WorkingDir") or "/")
    labels = sorted((settings.get("Labels") or {}).items())
    lines = [f"# {key} {' '.join(str(value).split())}" for key, value in labels]
    lines += [
        f"mkdir -p {workdir} 2> /dev/null",
        f"cd {workdir} && unset OLDPWD || exit 1",
        "",
        "if [ -s /etc/rc.local ]; then",
        "    . /etc/rc.local",
        "fi",
        "",
        "if [ $# -gt 0 ]; then",
        f"    exec {' '.join([*entrypoint, ARGUMENTS])}",
        "else",
        f"    exec {' '.join([*entrypoint, *command])}",
        "fi",
    ]
    return "\n".join(lines) + "\n"


def enroot_files(config: Mapping[str, Any]) -> list[ExtraFile]:
    """The files enroot's runtime reads, from the image's config (`docker image inspect`)."""
    env = "".join(f"{entry}\n" for entry in (config.get("Config") or {}).get("Env") or [])
    return [
        ExtraFile("etc/environment", env.encode()),
        ExtraFile("etc/fstab", b""),
        ExtraFile("etc/rc", rc_script(config).encode()),
        ExtraFile("etc/rc.local", b"# Sourced by /etc/rc when the container starts (enroot).\n"),
    ]


def squash_command(output: Path, epoch: int, processors: int | None = None) -> list[str]:
    """sqfstar's command that reads the tar on its standard input and writes ``output``."""
    threads = processors or os.cpu_count() or 1
    return [
        SQFSTAR, *ENROOT_SQUASH_OPTIONS, *REPRODUCIBLE_OPTIONS,
        "-mkfs-time", str(epoch), "-all-time", str(epoch), "-processors", str(threads),
        "-force", str(output),
    ]  # fmt: skip


def write_sqsh(exported_fs: IO[bytes], config: Mapping[str, Any], output: Path) -> str:
    """Write ``output``, enroot's squashfs of the file system `docker export` streams in
    ``exported_fs`` and of the image ``config`` (`docker image inspect`); its SHA-256."""
    if shutil.which(SQFSTAR) is None:
        raise EngineError(f"{SQFSTAR} is not installed (Debian: squashfs-tools >= 4.5)")
    epoch = epoch_of(config)
    partial = output.with_name(output.name + ".partial")
    try:
        with subprocess.Popen(
            squash_command(partial, epoch), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL
        ) as squash:
            assert squash.stdin is not None
            with squash.stdin:
                files = enroot_files(config)
                chunks = canonical_chunks(exported_fs, epoch, enroot_mode, files, kept)
                write_chunks(chunks, squash.stdin)
        if squash.returncode != 0:
            raise EngineError(f"{SQFSTAR} failed (exit status {squash.returncode})")
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
    return sha256_of(output)


def export(tag: str, output: Path) -> str:
    """Write ``output``, enroot's squashfs of the image ``tag``; its SHA-256."""
    with exported(tag) as stream:
        return write_sqsh(stream, inspect(tag), output)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def default_output(tag: str) -> Path:
    """enroot's name for the squashfs of ``tag`` (ddpimg:gpu -> ddpimg+gpu.sqsh)."""
    try:
        return Path(names_of_tag(tag).sqsh)
    except ValueError:
        return Path(f"{tag.replace(':', '+').replace('/', '+')}.sqsh")


@contextlib.contextmanager
def _second(output: Path) -> Iterator[Path]:
    path = output.with_name(f"{output.name}.second")
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def export_session(session: Session, posargs: Sequence[str]) -> None:
    """`nox -s sqsh -- IMAGE [--output FILE] [--twice]`."""
    parser = argparse.ArgumentParser(prog="nox -s sqsh --", allow_abbrev=False)
    parser.add_argument("image", help="a tag of the local engine, e.g. ddpimg:cpu")
    parser.add_argument("--output", type=Path, help="default: enroot's name, ddpimg+KIND.sqsh")
    parser.add_argument(
        "--twice", action="store_true", help="export a second time and compare the SHA-256s"
    )
    ns = parser.parse_args(list(posargs))
    output = ns.output or default_output(ns.image)
    try:
        digest = export(ns.image, output)
        session.log(f"wrote {output}: sha256 {digest}")
        if ns.twice:
            with _second(output) as second:
                again = export(ns.image, second)
            if again != digest:
                session.error(f"two exports of {ns.image} differ: sha256 {digest} and {again}")
            session.log(f"a second export of {ns.image} has the same sha256 {again}")
    except (EngineError, ValueError) as err:
        session.error(str(err))
