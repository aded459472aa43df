"""The largest token of every shard, scanned once and kept (no torch here).

Checking that every token lies in the vocabulary needs one pass over the data, which for a
corpus of billions of tokens takes minutes: it is done once, by one process, and its result
kept in ``tokens.json`` of the index folder (beside the data, ``DIR/.ddpimg-index``, or
where the data is read-only, the run's directory: the image datasets' rule,
``ddpimg.data.images.index_dirs``). An entry is valid while its shard keeps its size and
modification time (whole seconds, which copies keep); ``ddpimg data tokenize`` writes the
entries of the shards it makes, so its output is never scanned.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TextIO

from ddpimg.data.images import index_dirs, writable_index_dir
from ddpimg.data.tokenshards import TokenShard, TokenSplits, scan_max_token
from ddpimg.fsio import write_json_atomic
from ddpimg.untrusted import MIB, read_json

INDEX_NAME = "tokens"
INDEX_FILE = "tokens.json"
INDEX_LIMIT = 64 * MIB  # about 200 bytes a shard


def _identity(path: Path) -> dict[str, int]:
    status = path.stat()
    return {"size": status.st_size, "mtime": int(status.st_mtime)}


def _read(folder: Path) -> dict[str, Any]:
    try:
        content = read_json(folder / INDEX_FILE, INDEX_LIMIT)
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}


def _known(entries: dict[str, Any], shard: TokenShard) -> int | None:
    """The shard's largest token if the index has a valid entry for it as it is now; an
    entry of any other shape (an edited or damaged index) counts as none: it is scanned
    again."""
    entry = entries.get(str(shard.path.resolve()))
    if not isinstance(entry, dict):
        return None
    largest = entry.get("max_token")
    if type(largest) is not int or largest < -1:
        return None
    if {k: entry.get(k) for k in ("size", "mtime")} != _identity(shard.path):
        return None
    return largest


def record(folder: Path, maxima: dict[Path, int]) -> None:
    """Add the largest tokens of these shard files to the index in ``folder``."""
    entries = _read(folder)
    for path, largest in maxima.items():
        entries[str(path.resolve())] = {**_identity(path), "max_token": largest}
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / INDEX_FILE, entries, indent=1)


def root_of(splits: TokenSplits) -> Path:
    """The folder whose index holds the dataset's entries: the first training shard's."""
    return splits.train[0].path.parent


def max_tokens(splits: TokenSplits, fallback: Path) -> dict[Path, int] | None:
    """Every shard's largest token from an index that knows them all (beside the data
    first); None while none does."""
    for directory in index_dirs(root_of(splits), fallback):
        entries = _read(directory / INDEX_NAME)
        found = {shard.path: _known(entries, shard) for shard in splits.all()}
        known = {path: value for path, value in found.items() if value is not None}
        if len(known) == len(found):
            return known
    return None


def prepare(splits: TokenSplits, fallback: Path, stream: TextIO | None = None) -> None:
    """Scan the shards no index knows (reported on ``stream``) and record them, with the
    entries known already, in the first index folder this process may write."""
    if max_tokens(splits, fallback) is not None:
        return
    root = root_of(splits)
    known: dict[Path, int] = {}
    for directory in index_dirs(root, fallback):
        entries = _read(directory / INDEX_NAME)
        for shard in splits.all():
            value = _known(entries, shard)
            if value is not None:
                known.setdefault(shard.path, value)
    missing = [shard for shard in splits.all() if shard.path not in known]
    folder = writable_index_dir(root, fallback) / INDEX_NAME
    if stream is not None:
        tokens = sum(shard.tokens for shard in missing)
        print(
            f"ddpimg: scanning {tokens:,} tokens of {len(missing)} shard(s) for the largest "
            f"token, once (index: {folder})",
            file=stream,
            flush=True,
        )
    began = time.monotonic()
    known |= {shard.path: scan_max_token(shard) for shard in missing}
    record(folder, known)
    if stream is not None:
        print(
            f"ddpimg: scanned in {time.monotonic() - began:.1f} s; later runs reuse the index",
            file=stream,
            flush=True,
        )
