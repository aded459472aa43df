"""``ddpimg data tokenize SRC... DST``: text files, or JSONL files with a text field, into
llm.c token shards, ready for ``train gpt --data DST``.

Documents: a ``.txt`` file is one document; every line of a ``.jsonl`` file is one (its
``--text-field``, ``text`` by default). Directories are searched for both, recursively, and
everything is taken in sorted path order, so the same sources give the same shards.

Document i (from 0) goes to the validation split when i is a multiple of ``--val-every``
(100: 1 %), else to the training split; each split is written as llm.c shards of
``--shard-tokens`` tokens (llm.c's 100M; the last one shorter): ``NAME_val_000000.bin``,
``NAME_train_000000.bin``, ... in the version-1 format (uint16) when the vocabulary fits in
16 bits, else version 7 (uint32). Each document is preceded by the end-of-text token.

``--workers`` processes encode chunks of documents (about ``CHUNK_BYTES`` of text each)
while this process reads the next ones and writes the tokens in document order, a shard at a
time under a temporary name; a progress bar counts the bytes read. At the end
``tokenizer.json`` records the tokenizer and its vocabulary (which ``train gpt`` takes as the
data's) and the token index (``tokenindex``) gets every shard's largest token, so training
never scans them.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ddpimg.data import tokenindex
from ddpimg.data.images import writable_index_dir
from ddpimg.data.tokenizers import Tokenizer, encode_documents, load_tokenizer
from ddpimg.data.tokenshards import (
    HEADER_BYTES,
    LLMC_V1,
    LLMC_V7,
    TOKENIZER_FILE,
    ShardFormat,
)
from ddpimg.errors import DataError, printable
from ddpimg.fsio import fsync_path, write_json_atomic
from ddpimg.progress_bar import ProgressBar
from ddpimg.untrusted import BadInput, check_regular, parse_json

DEFAULT_SHARD_TOKENS = 100_000_000
DEFAULT_VAL_EVERY = 100
CHUNK_BYTES = 1 << 20
TEXT_SUFFIXES = (".txt",)
JSONL_SUFFIXES = (".jsonl",)
SOURCE_HINT = "give .txt files (one document each) or .jsonl files (a document a line)"


@dataclass(frozen=True)
class TokenizeOptions:
    tokenizer: str = "gpt2"
    encoding_dir: Path | None = None
    text_field: str = "text"
    shard_tokens: int = DEFAULT_SHARD_TOKENS
    val_every: int = DEFAULT_VAL_EVERY
    workers: int = 1
    name: str = "corpus"


@dataclass
class Chunk:
    """Documents ``first`` .. ``first + len(texts)`` of ``source``: raw JSON lines, with
    their line numbers, when ``lines`` is not None."""

    first: int
    texts: list[str]
    source: str
    bytes: int
    lines: list[int] | None = None


def input_files(sources: list[Path]) -> list[Path]:
    """The text and JSONL files of ``sources`` (files, or directories searched
    recursively), in sorted order; DataError naming a source that holds none."""
    files: list[Path] = []
    suffixes = TEXT_SUFFIXES + JSONL_SUFFIXES
    for source in sources:
        if source.is_dir():
            found = sorted(p for p in source.rglob("*") if p.suffix in suffixes and p.is_file())
            if not found:
                raise DataError(f"{source}: no .txt or .jsonl file in it", hint=SOURCE_HINT)
            files.extend(found)
        elif source.is_file():
            if source.suffix not in suffixes:
                raise DataError(f"{source} is neither .txt nor .jsonl", hint=SOURCE_HINT)
            files.append(source)
        else:
            raise DataError(f"{source} does not exist", hint=SOURCE_HINT)
    return files


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(
            f"{where}: not UTF-8 text: byte {err.start} is 0x{data[err.start]:02x} ({err.reason})",
            hint="convert it, e.g. iconv -f latin1 -t utf-8",
        ) from err


def chunks(files: list[Path]) -> Iterator[Chunk]:
    """The documents of ``files`` in order, about ``CHUNK_BYTES`` of text a chunk."""
    first = 0
    for path in files:
        try:
            check_regular(path)  # a FIFO or a device would never end
        except BadInput as err:
            raise DataError(f"{printable(str(path))} is {err}", hint="give text files") from err
        if path.suffix in TEXT_SUFFIXES:
            data = path.read_bytes()
            yield Chunk(first, [_decode(data, str(path))], str(path), len(data))
            first += 1
            continue
        with path.open("rb") as stream:
            chunk = Chunk(first, [], str(path), 0, [])
            for number, raw in enumerate(stream, start=1):
                chunk.bytes += len(raw)
                if raw.strip():
                    chunk.texts.append(_decode(raw, f"{path}:{number}"))
                    chunk.lines.append(number)  # type: ignore[union-attr]
                if chunk.bytes >= CHUNK_BYTES:
                    yield chunk
                    first += len(chunk.texts)
                    chunk = Chunk(first, [], str(path), 0, [])
            if chunk.bytes:
                yield chunk
                first += len(chunk.texts)


# The worker processes' tokenizer, set by ``_start_worker`` (fork: inherited, not pickled).
_WORKER: dict[str, Tokenizer] = {}


def _start_worker(tokenizer: Tokenizer) -> None:
    _WORKER["tokenizer"] = tokenizer


def _texts(chunk: Chunk, text_field: str) -> list[str]:
    if chunk.lines is None:
        return chunk.texts
    texts = []
    for line, number in zip(chunk.texts, chunk.lines, strict=True):
        try:
            record = parse_json(line)
        except ValueError as err:
            raise DataError(
                f"{chunk.source}:{number}: {err}",
                hint="every non-empty line of a .jsonl file is one JSON object",
            ) from err
        if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
            raise DataError(
                f"{chunk.source}:{number}: no string field {text_field!r}",
                hint="name the documents' field with --text-field",
            )
        texts.append(record[text_field])
    return texts


def encode_chunk(job: tuple[Chunk, str, int, str]) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(training tokens, validation tokens, documents, bytes) of one chunk, in a worker."""
    chunk, text_field, val_every, dtype = job
    tokenizer = _WORKER["tokenizer"]
    texts = _texts(chunk, text_field)
    numbers = range(chunk.first, chunk.first + len(texts))
    val = [text for number, text in zip(numbers, texts, strict=True) if number % val_every == 0]
    train = [text for number, text in zip(numbers, texts, strict=True) if number % val_every]
    kind = np.dtype(dtype)
    return (
        encode_documents(tokenizer, train, kind),
        encode_documents(tokenizer, val, kind),
        len(texts),
        chunk.bytes,
    )


@dataclass
class ShardWriter:
    """One split's shards, written in order, one open at a time."""

    target: Path
    prefix: str
    split: str
    shard_format: ShardFormat
    shard_tokens: int
    written: list[Path] = field(default_factory=list)
    maxima: dict[Path, int] = field(default_factory=dict)
    tokens: int = 0
    _stream: Any = None
    _temporary: Path | None = None
    _count: int = 0
    _largest: int = -1

    def add(self, tokens: np.ndarray) -> None:
        while len(tokens):
            if self._stream is None:
                self._open()
            room = self.shard_tokens - self._count
            part, tokens = tokens[:room], tokens[room:]
            self._stream.write(part.tobytes())
            self._count += len(part)
            self._largest = max(self._largest, int(part.max()))
            self.tokens += len(part)
            if self._count == self.shard_tokens:
                self.close()

    def _open(self) -> None:
        name = f"{self.prefix}_{self.split}_{len(self.written):06d}.bin"
        self._temporary = self.target / f".{name}.{os.getpid()}.tmp"
        self._stream = self._temporary.open("wb")
        self._stream.write(b"\0" * HEADER_BYTES)
        self._count, self._largest = 0, -1

    def close(self) -> None:
        """Finish the open shard: its header, fsync, rename."""
        if self._stream is None or self._temporary is None:
            return
        header = np.zeros(HEADER_BYTES // 4, dtype="<i4")
        header[:3] = (self.shard_format.magic, self.shard_format.version, self._count)
        self._stream.seek(0)
        self._stream.write(header.tobytes())
        self._stream.flush()
        os.fsync(self._stream.fileno())
        self._stream.close()
        final = self.target / f"{self.prefix}_{self.split}_{len(self.written):06d}.bin"
        self._temporary.rename(final)
        self.written.append(final)
        self.maxima[final] = self._largest
        self._stream, self._temporary = None, None

    def abandon(self) -> None:
        if self._stream is not None and self._temporary is not None:
            self._stream.close()
            self._temporary.unlink(missing_ok=True)
            self._stream = None


@dataclass(frozen=True)
class TokenizeResult:
    documents: int
    train: ShardWriter
    val: ShardWriter
    tokenizer: str
    vocabulary: int
    seconds: float
    bytes: int

    @property
    def tokens_per_s(self) -> float:
        return (self.train.tokens + self.val.tokens) / max(self.seconds, 1e-9)


def tokenize(
    sources: list[Path], target: Path, options: TokenizeOptions, stream: TextIO
) -> TokenizeResult:
    """Tokenize ``sources`` into llm.c shards in ``target`` (reporting on ``stream``)."""
    tokenizer = load_tokenizer(options.tokenizer, options.encoding_dir)
    files = input_files(sources)
    if target.exists() and any(target.glob(f"{options.name}_*.bin")):
        raise DataError(
            f"{target} holds {options.name}_*.bin shards already",
            hint="tokenize into a new directory, or remove the old shards first",
        )
    target.mkdir(parents=True, exist_ok=True)
    shard_format = LLMC_V1 if tokenizer.vocabulary <= 1 << 16 else LLMC_V7
    writers = {
        split: ShardWriter(target, options.name, split, shard_format, options.shard_tokens)
        for split in ("train", "val")
    }
    total = sum(path.stat().st_size for path in files)
    progress = ProgressBar("tokenizing", total, "bytes", stream)
    jobs = ((chunk, options.text_field, options.val_every, shard_format.dtype.str)
            for chunk in chunks(files))  # fmt: skip
    documents = 0
    began = time.monotonic()
    context = multiprocessing.get_context("fork")
    try:
        with context.Pool(max(options.workers, 1), _start_worker, (tokenizer,)) as pool:
            for train, val, count, size in pool.imap(encode_chunk, jobs):
                writers["train"].add(train)
                writers["val"].add(val)
                documents += count
                progress.advance(size)
        for writer in writers.values():
            writer.close()
    except BaseException:
        for writer in writers.values():
            writer.abandon()
        raise
    progress.close()
    seconds = time.monotonic() - began
    for split, writer in writers.items():
        if not writer.written:
            raise DataError(
                f"{len(files)} file(s) gave {documents} document(s), none of them for the {split} "
                f"split (document i is a validation document when i is a multiple of "
                f"--val-every {options.val_every})",
                hint="give more documents (a .txt file is one), or another --val-every",
            )
    write_json_atomic(
        target / TOKENIZER_FILE,
        {
            "tokenizer": tokenizer.name,
            "vocabulary": tokenizer.vocabulary,
            "eot_token": tokenizer.eot,
            "documents": documents,
            "train_tokens": writers["train"].tokens,
            "val_tokens": writers["val"].tokens,
        },
        indent=1,
    )
    folder = writable_index_dir(target, target) / tokenindex.INDEX_NAME
    tokenindex.record(folder, writers["train"].maxima | writers["val"].maxima)
    fsync_path(target)
    return TokenizeResult(
        documents, writers["train"], writers["val"], tokenizer.name, tokenizer.vocabulary,
        seconds, total,
    )  # fmt: skip


def describe(result: TokenizeResult, target: Path) -> str:
    """What ``ddpimg data tokenize`` prints at the end."""
    splits = ", ".join(
        f"{writer.tokens:,} {writer.split} tokens in {len(writer.written)} shard(s)"
        for writer in (result.train, result.val)
    )
    return "\n".join(
        [
            f"{target}: {result.documents:,} documents, {splits} ({result.tokenizer}, "
            f"vocabulary {result.vocabulary:,}); {result.tokens_per_s:,.0f} tokens/s",
            f"train on it:   train gpt --data {target}",
        ]
    )
