"""DeepSpeed's CPU all-reduce buffer in /dev/shm, unlinked once every rank has mapped it.

On the CPU, DeepSpeed 0.19.8's communication op (``ops/csrc/cpu/comm/shm.cpp``), when every
rank is on one machine (``LOCAL_SIZE`` equals the world size), creates one POSIX shared
memory segment per rank, ``deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>``
(69 MB), and maps every other rank's. It never unlinks them (its ``shared_close`` is never
called), so every CPU run leaves its ranks' segments in /dev/shm: RAM held by tmpfs until the
machine restarts (126 of them, 6.4 GB, on a development machine, 2026-11-26).

A segment's name is only needed until the other ranks have opened it, which each rank does
inside ``deepspeed.init_distributed``. After a barrier that follows it on every rank, each
rank unlinks its own segment: the one it maps whose name ends with its rank (read from
/proc/self/maps, so no name is guessed). The memory stays mapped until the processes end, as
an unlinked file's does, and nothing is left behind even when a run is killed later.
``--strategy deepspeed`` does that (ddpimg.train.strategies.deepspeed); a user's script that
uses DeepSpeed under ``train --script`` has no such point ddpimg sees, so each rank unlinks its
own as the script ends (ddpimg.script.boot): left behind only when a rank is killed.
"""

from __future__ import annotations

from pathlib import Path

PREFIX = "/dev/shm/deepspeed_allreduce_buffer_"
MAPS = Path("/proc/self/maps")


def own_buffers(maps: str, rank: int) -> list[Path]:
    """The segments of ``rank`` among the mappings listed in ``maps`` (/proc/PID/maps's
    format: the path is the sixth field; an unlinked one ends with " (deleted)")."""
    found: list[str] = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        path = fields[5] if len(fields) == 6 else ""
        if path.startswith(PREFIX) and path.endswith(f"_{rank}") and path not in found:
            found.append(path)
    return [Path(path) for path in found]


def release_buffers(rank: int, maps: Path = MAPS) -> list[Path]:
    """Unlink this rank's segments, once every rank has mapped them (the caller's barrier);
    those unlinked (none: not DeepSpeed's CPU op, or ranks on several machines)."""
    released = []
    for path in own_buffers(maps.read_text(), rank):
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        released.append(path)
    return released
