"""Staging a tree on the login node by content: the login node says which of the tree's
contents its store lacks; one tar stream brings those and lays out the submission's directory
as hard links into the store. A second submit of the same tree copies no file's content.

The stream is built here from the local files (names made by ``tree``), so the login node
unpacks only what the laptop wrote; it checks the new contents' sums before it keeps them
(``programs.unpack``), and a stream cut short leaves nothing behind.
"""

from __future__ import annotations

import io
import os
import secrets
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from ddpimg.errors import printable
from ddpimg.remote import programs
from ddpimg.remote.transport import RemoteError, Transport, stderr_lines
from ddpimg.remote.tree import Tree, TreeFile

# A minute per 100 MB at a slow 15 Mbit/s uplink, and a floor for the unpacking.
STAGE_TIMEOUT_FLOOR_S = 120.0
BYTES_PER_S = 2 << 20


@dataclass(frozen=True)
class Staged:
    """What staging did: the submission's directory on the login node (absolute), and how
    much of the tree it had to send."""

    job_dir: str
    files: int
    new_files: int
    new_bytes: int


def stage_tree(transport: Transport, tree: Tree, root: str, job: str) -> Staged:
    """Stage ``tree`` as submission ``job`` under the remote directory ``root``."""
    wanted = {item.object_name: item for item in tree.files}
    answer = transport.run(
        programs.missing_objects(root),
        "which staged files the login node lacks",
        stdin="".join(f"{name}\n" for name in sorted(wanted)).encode(),
    )
    # Only names that were asked about count: anything else in the answer is ignored.
    missing = sorted({line for line in answer.text.splitlines() if line in wanted})
    token = secrets.token_hex(8)
    new_bytes = sum(wanted[name].size for name in missing)
    timeout = STAGE_TIMEOUT_FLOOR_S + new_bytes / BYTES_PER_S
    done = transport.write_stream(
        programs.unpack(root, job, token),
        "the staged tree",
        lambda pipe: write_stream(pipe, tree, [wanted[name] for name in missing], job, token),
        timeout=timeout,
    )
    if done.status != 0:
        said = "; ".join(printable(line) for line in stderr_lines(done)) or f"status {done.status}"
        hint = (
            "what arrived does not match what was read here (a file changed while it was "
            "sent, or the transfer was damaged); submit again once nothing writes into the "
            "tree"
            if done.status == programs.CHECK_FAILED
            else "check the space (quota) under --remote-dir on the login node, then submit again"
        )
        raise RemoteError(
            f"{transport.host}: staging the tree into {root}/{programs.JOBS}/{job} failed: {said}",
            hint=f"nothing of this submission was kept there; {hint}",
        )
    lines = done.text.splitlines()
    return Staged(lines[-1] if lines else "", len(tree.files), len(missing), new_bytes)


def write_stream(
    pipe: IO[bytes], tree: Tree, new: Sequence[TreeFile], job: str, token: str
) -> None:
    """The tar stream ``programs.unpack`` takes: new contents under incoming/TOKEN/, their
    sums, and the tree under jobs/JOB/ as hard links (to the store, or to a new content)."""
    incoming = f"{programs.INCOMING}/{token}"
    fresh = {item.object_name for item in new}
    with tarfile.open(fileobj=pipe, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for item in new:
            with tree.local_path(item).open("rb") as stream:
                info = _entry(f"{incoming}/{item.object_name}", 0o555 if item.executable else 0o444)
                info.size = os.fstat(stream.fileno()).st_size
                tar.addfile(info, stream)
        if new:
            sums = "".join(f"{item.digest}  {item.object_name}\n" for item in new).encode()
            info = _entry(f"{incoming}.sha256", 0o644)
            info.size = len(sums)
            tar.addfile(info, io.BytesIO(sums))
        base = f"{programs.JOBS}/{job}"
        folder = _entry(base, 0o755, tarfile.DIRTYPE)
        tar.addfile(folder)
        if tree.subdir != ".":
            tar.addfile(_entry(f"{base}/{tree.subdir}", 0o755, tarfile.DIRTYPE))
        for item in tree.files:
            link = _entry(f"{base}/{item.path}", 0o444, tarfile.LNKTYPE)
            store = incoming if item.object_name in fresh else programs.OBJECTS
            link.linkname = f"{store}/{item.object_name}"
            tar.addfile(link)


def _entry(name: str, mode: int, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.type = kind
    info.mtime = int(time.time())
    return info
