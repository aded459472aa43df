"""Which run directories a live process is writing: rank 0 of a run in a directory it chose
holds an exclusive ``flock`` on ``DIR/.ddpimg-lock`` until it exits, however it exits (the
kernel drops the lock with the process: a Ctrl-C, a crash, SIGKILL, the out-of-memory
killer). So the same command started in a second terminal, whose manifest.json reads
``running`` like one killed outright, does not continue the run still going: it takes a
new directory.

On a file system without ``flock`` (Lustre mounted without ``flock``, some NFS set-ups) the
lock cannot be taken, and a run that did not complete is taken as free: what a requeued
job needs. Nothing is written into an explicit ``--out``.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = ".ddpimg-lock"
# Held for the life of this process: the descriptors are never closed.
_held: list[int] = []
# Errors by which a file system says it keeps no such locks.
_UNSUPPORTED = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)


def hold(directory: Path) -> bool:
    """Take ``directory``'s lock for the rest of this process's life: True when taken (or
    when the file system keeps no locks), False when another process holds it or the lock
    file cannot be opened as one (a link, say: then the directory is not taken either)."""
    try:
        descriptor = os.open(
            directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
        )
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(descriptor)
        return err.errno in _UNSUPPORTED
    _held.append(descriptor)
    return True


@contextmanager
def holding(directory: Path) -> Iterator[bool]:
    """``hold`` for the length of a block (a sweep's directory, while its points run): the
    lock is dropped when the block ends. Yields False when another process holds it."""
    held_before = len(_held)
    taken = hold(directory)
    try:
        yield taken
    finally:
        if taken and len(_held) > held_before:
            os.close(_held.pop())
