"""The image's bytecode (.pyc) files, written once and hash-checked (PEP 552).

A timestamp-based .pyc, what pip and Debian write by default, holds its source's mtime: two
builds write different bytes, and an image whose file times are set to SOURCE_DATE_EPOCH
afterwards (containers/imagebuild/rootfs.py) would hold pycs that no longer match their
sources, which Python then recompiles at every start. A checked-hash .pyc holds the
source's hash instead: the same bytes for the same source, valid whatever the file times,
and still checked against the source at import (a patched module is recompiled, not
ignored).

    python3 pycs.py compile DIR...   every .py below DIR (or DIR itself, a .py file) compiled
                                     to a checked-hash .pyc
    python3 pycs.py rehash DIR...    every timestamp-based .pyc below DIR rewritten as a
                                     checked-hash one of its source (a .pyc whose source is
                                     gone is removed: Python ignores it anyway)
    python3 pycs.py check DIR...     list the timestamp-based .pyc files below DIR; exit 1 if any

``compile`` splits the sorted sources into PARTS consecutive runs of about equal size and
compiles each in a fresh process of its own, in sorted order: marshal's output depends on the
reference counts in the process that compiles (compileall -j 0 and -j 1 wrote one file
differently in a trial on the cpu image), so the same runs in fresh processes write the same
bytes. The number of parts is fixed, not the machine's cores: another machine splits the same
way and writes the same bytes. A source this interpreter cannot compile (a test file in a
newer Python's syntax) is skipped and named, as pip's own compile step skips it. Run it with
the interpreter that imports the files (the venv's for the venv, the system's for /usr).
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

CHECKED_HASH = py_compile.PycInvalidationMode.CHECKED_HASH
# PEP 552: the 4-byte flags field after the magic number; 0 means timestamp-based.
FLAGS = slice(4, 8)
# The compile's parts (see above): four processes take half the time of one on two cores
# (the cpu image's venv: about 50 s in one).
PARTS = 4


def files_below(directory: str, suffix: str) -> Iterator[Path]:
    """The files named *SUFFIX below ``directory``, in sorted order, links not followed;
    ``directory`` itself when it is such a file."""
    if os.path.isfile(directory):
        if directory.endswith(suffix) and not os.path.islink(directory):
            yield Path(directory)
        return
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            path = Path(root, name)
            if name.endswith(suffix) and not path.is_symlink():
                yield path


def is_timestamp_pyc(header: bytes) -> bool:
    """Whether a .pyc header (its first 16 bytes) is timestamp-based (PEP 552 flags 0)."""
    return len(header) >= 16 and int.from_bytes(header[FLAGS], "little") == 0


def source_of(pyc: Path) -> Path | None:
    """The source of ``__pycache__/NAME.TAG[.opt-N].pyc``: ``../NAME.py`` (None elsewhere)."""
    if pyc.parent.name != "__pycache__":
        return None
    return pyc.parent.parent / f"{pyc.name.split('.')[0]}.py"


def optimization(pyc: Path) -> int:
    """The optimization level in a .pyc's name (``.opt-1.pyc``: 1; none: 0)."""
    for part in pyc.name.split("."):
        if part.startswith("opt-") and part[4:].isdigit():
            return int(part[4:])
    return 0


def split(sources: Sequence[Path], parts: int = PARTS) -> list[list[Path]]:
    """``sources`` in at most ``parts`` consecutive runs of about equal total size; the same
    runs for the same files, whatever the machine."""
    sizes = [source.stat().st_size + 1 for source in sources]
    total = sum(sizes)
    runs: list[list[Path]] = [[] for _ in range(parts)]
    done = 0
    for source, size in zip(sources, sizes, strict=True):
        runs[min(parts - 1, done * parts // total)].append(source)
        done += size
    return [run for run in runs if run]


def compile_files(sources: Sequence[Path]) -> list[Path]:
    """Compile ``sources`` in this process, in their order (checked-hash); those skipped."""
    skipped = []
    for source in sources:
        try:
            py_compile.compile(str(source), doraise=True, invalidation_mode=CHECKED_HASH)
        except py_compile.PyCompileError:
            skipped.append(source)
    return skipped


def compile_tree(directories: Sequence[str]) -> list[Path]:
    """Compile every .py below ``directories`` (checked-hash), each run of ``split`` in a
    fresh process (side by side); the sources skipped."""
    sources = [source for directory in directories for source in files_below(directory, ".py")]
    skipped: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="pycs-") as work:
        workers = []
        for index, run in enumerate(split(sources)):
            listing = Path(work, f"part-{index}")
            listing.write_bytes(b"\0".join(os.fsencode(source) for source in run))
            command = [sys.executable, __file__, "compile-files", str(listing)]
            workers.append(subprocess.Popen(command, stdout=subprocess.PIPE))
        for worker in workers:
            out, _ = worker.communicate()
            if worker.returncode != 0:
                raise RuntimeError(
                    f"pycs.py compile-files failed (exit status {worker.returncode})"
                )
            skipped += [Path(os.fsdecode(name)) for name in out.split(b"\0") if name]
    return skipped


def timestamp_pycs(directories: Sequence[str]) -> list[Path]:
    """The timestamp-based .pyc files below ``directories``."""
    found = []
    for directory in directories:
        for pyc in files_below(directory, ".pyc"):
            with pyc.open("rb") as handle:
                if is_timestamp_pyc(handle.read(16)):
                    found.append(pyc)
    return found


def rehash(directories: Sequence[str]) -> tuple[int, list[Path]]:
    """Rewrite this interpreter's timestamp-based .pyc files below ``directories`` as
    checked-hash ones (removing those without a source); how many were rewritten, and the
    timestamp-based ones of another interpreter (another magic number), left as they are."""
    magic = importlib.util.MAGIC_NUMBER
    rewritten, foreign = 0, []
    for pyc in timestamp_pycs(directories):
        with pyc.open("rb") as handle:
            if handle.read(4) != magic:
                foreign.append(pyc)
                continue
        source = source_of(pyc)
        if source is None or not source.is_file():
            pyc.unlink()
            continue
        py_compile.compile(
            str(source),
            cfile=str(pyc),
            doraise=True,
            optimize=optimization(pyc),
            invalidation_mode=CHECKED_HASH,
        )
        rewritten += 1
    return rewritten, foreign


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("compile", "rehash", "check", "compile-files"):
        print("usage: pycs.py compile|rehash|check DIR...", file=sys.stderr)
        return 2
    command, directories = argv[0], argv[1:]
    if command == "compile-files":  # one part of `compile`: the NUL-separated paths in a file
        listing = Path(directories[0]).read_bytes()
        run = [Path(os.fsdecode(name)) for name in listing.split(b"\0") if name]
        sys.stdout.buffer.write(b"\0".join(os.fsencode(path) for path in compile_files(run)))
        return 0
    if command == "compile":
        skipped = compile_tree(directories)
        print(f"pycs.py: compiled {', '.join(directories)} (checked-hash pycs)")
        for source in skipped:
            print(
                f"pycs.py: skipped {source}: not Python {sys.version_info[0]}.{sys.version_info[1]}"
            )
        return 0
    if command == "rehash":
        count, foreign = rehash(directories)
        below = ", ".join(directories)
        print(f"pycs.py: {count} timestamp-based pycs rewritten as checked-hash below {below}")
        for pyc in foreign:
            print(f"pycs.py: left {pyc}: another interpreter's", file=sys.stderr)
        return 0
    found = timestamp_pycs(directories)
    for pyc in found:
        print(pyc)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
