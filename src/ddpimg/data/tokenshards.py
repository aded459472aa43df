"""Token shards on storage: llm.c's and nanoGPT's ``.bin`` files, validated and read by
random access without loading them (no torch here).

Formats:

* **llm.c** (``dev/data/data_common.py``): a header of 256 little-endian int32, ``[magic,
  version, token count, 0...]``, then the tokens. Magic 20240520 with version 1: uint16
  tokens (GPT-2's vocabulary); magic 20240801 with version 7: uint32 tokens (LLaMA 3's).
* **nanoGPT** (``data/*/prepare.py``): no header at all, uint16 tokens from the first byte.

How a file's kind is told: the first int32 is one of the two magics -> llm.c, and then the
version and the size must agree with the header (1024 + count x 2 or 4 bytes), else it is an
error naming the file. Any other file is nanoGPT's. That guess cannot go wrong unnoticed: a
nanoGPT file would need GPT-2 token 54472 or 54689 first (beyond GPT-2's 50257) to look like
llm.c; a file whose first three int32 look like an llm.c header with another magic (version
1 or 7, the size matching the count) is refused; a nanoGPT file must have an even size; every
file of a dataset must be of one kind; and every token must lie in the data's vocabulary
(``vocabulary``), checked once for the whole dataset (``scan_max_tokens``).

Validation shards: a file whose name has the word ``val`` in it (separated by ``_``, ``-``
or ``.``: llm.c's ``fineweb_val_000000.bin`` and ``tiny_shakespeare_val.bin``, nanoGPT's
``val.bin``) is held out for evaluation; the others train.

A sample is a window of ``seq_len + 1`` tokens; a shard of n tokens holds ``(n - 1) //
seq_len`` windows, each starting at the last token of the one before (that token is its
first input and the previous window's last target), and windows never cross shards. Window
i of a dataset is found through the cumulative window counts of its shards, and read by
random access (``WindowReader``).
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ddpimg.errors import DataError, printable
from ddpimg.untrusted import BadInput, open_regular, read_json

HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
GPT2_VOCABULARY = 50257
LLAMA3_VOCABULARY = 128256
# ``ddpimg data tokenize`` writes this beside its shards: the tokenizer and its vocabulary.
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_FILE_LIMIT = 1 << 20  # ddpimg writes a line of about 100 bytes
# The largest vocabulary a dataset or a model may have: four times the largest in use
# (262,144 tokens). A model's embedding has a row per token, so a record saying 10^12 would
# otherwise ask for terabytes before the first step.
MAX_VOCABULARY = 1 << 20
# Shard files kept open per process; older ones are closed first (the limit on open files
# is often 1024).
OPEN_SHARDS = 128
_VAL_WORD = re.compile(r"(^|[_.-])val([_.-]|$)")
_GLOB_CHARS = frozenset("*?[")
DATA_HINT = (
    "give a directory or glob of llm.c shards (*_train_*.bin, *_val_*.bin) or nanoGPT files "
    "(train.bin, val.bin), e.g. from `ddpimg data tokenize`, or --data synthetic"
)


@dataclass(frozen=True)
class ShardFormat:
    """How one kind of file stores its tokens; ``vocabulary``: the vocabulary its
    tokenizer has when the data says nothing else."""

    name: str
    dtype: np.dtype[np.unsignedinteger]
    header_bytes: int
    vocabulary: int
    #: The token that delimits documents: GPT-2's <|endoftext|>, LLaMA 3's <|begin_of_text|>
    #: (what llm.c's scripts put before every document).
    eot: int
    magic: int | None = None
    version: int | None = None


LLMC_V1 = ShardFormat(
    "llm.c v1", np.dtype("<u2"), HEADER_BYTES, GPT2_VOCABULARY, 50256, 20240520, 1
)
LLMC_V7 = ShardFormat(
    "llm.c v7", np.dtype("<u4"), HEADER_BYTES, LLAMA3_VOCABULARY, 128000, 20240801, 7
)
NANOGPT = ShardFormat("nanoGPT", np.dtype("<u2"), 0, GPT2_VOCABULARY, 50256)
LLMC_FORMATS = {shard_format.magic: shard_format for shard_format in (LLMC_V1, LLMC_V7)}


@dataclass(frozen=True)
class TokenShard:
    path: Path
    format: ShardFormat
    tokens: int

    def windows(self, seq_len: int) -> int:
        return max(self.tokens - 1, 0) // seq_len


def is_validation(path: Path) -> bool:
    """The validation rule: ``val`` as a word of the file name (see the module docstring)."""
    return _VAL_WORD.search(path.name.removesuffix(".bin")) is not None


def inspect_shard(path: Path) -> TokenShard:
    """The format and token count of ``path``, validated; DataError naming the file."""
    try:
        size = path.stat().st_size
        with os.fdopen(open_regular(path), "rb") as stream:  # never a FIFO or a device
            head = stream.read(HEADER_BYTES)
    except OSError as err:
        raise DataError(f"--data: {path} cannot be read ({err.strerror})", hint=DATA_HINT) from err
    except BadInput as err:
        raise DataError(f"--data: {printable(str(path))} is {err}", hint=DATA_HINT) from err
    ints = np.frombuffer(head[: len(head) // 4 * 4], dtype="<i4")
    magic = int(ints[0]) if len(ints) else None
    found = LLMC_FORMATS.get(magic) if magic is not None else None
    if found is not None:
        return _llmc_shard(path, size, ints, found)
    if len(ints) >= 3 and int(ints[1]) in (1, 7) and int(ints[2]) >= 0:
        itemsize = 2 if int(ints[1]) == 1 else 4
        if size == HEADER_BYTES + int(ints[2]) * itemsize:
            raise DataError(
                f"--data: {path} has an llm.c header (version {int(ints[1])}, {int(ints[2])} "
                f"tokens) with the unknown magic number {magic}",
                hint="llm.c writes magic 20240520 (version 1, uint16) or 20240801 (version 7, "
                "uint32); the file is damaged or of another format",
            )
    if size % NANOGPT.dtype.itemsize:
        raise DataError(
            f"--data: {path} has no llm.c header and an odd size ({size} bytes), so it is not "
            "nanoGPT's uint16 tokens either",
            hint=DATA_HINT,
        )
    return TokenShard(path, NANOGPT, size // NANOGPT.dtype.itemsize)


def _llmc_shard(path: Path, size: int, ints: np.ndarray, found: ShardFormat) -> TokenShard:
    if size < HEADER_BYTES:
        raise DataError(
            f"--data: {path} starts with llm.c's magic {found.magic} but has {size} bytes, less "
            f"than the {HEADER_BYTES}-byte header",
            hint="the file is truncated: write it again",
        )
    version, count = int(ints[1]), int(ints[2])
    if version != found.version:
        raise DataError(
            f"--data: {path}: llm.c magic {found.magic} goes with version {found.version}, the "
            f"header says version {version}",
            hint="the file is damaged, or was written by an llm.c version ddpimg does not know",
        )
    expected = HEADER_BYTES + count * found.dtype.itemsize
    if count < 0 or size != expected:
        raise DataError(
            f"--data: {path}: the llm.c header says {count} tokens ({expected} bytes in all), "
            f"the file has {size} bytes" + (" (truncated?)" if size < expected else ""),
            hint="write the shard again (an interrupted copy or tokenizer run leaves this)",
        )
    return TokenShard(path, found, count)


def write_llmc_shard(path: Path, tokens: np.ndarray, shard_format: ShardFormat = LLMC_V1) -> None:
    """Write ``tokens`` as an llm.c shard (``data_common.write_datafile``'s layout), under a
    temporary name renamed when complete."""
    if shard_format.magic is None or shard_format.version is None:
        raise ValueError(f"{shard_format.name} is not an llm.c format")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = (shard_format.magic, shard_format.version, len(tokens))
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("wb") as stream:
            stream.write(header.tobytes())
            stream.write(np.asarray(tokens, dtype=shard_format.dtype).tobytes())
            stream.flush()
            os.fsync(stream.fileno())
        temporary.rename(path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def resolve_files(spec: str, flag: str = "--data") -> list[Path]:
    """The ``.bin`` files ``spec`` names: a directory (its ``*.bin``), a glob, or one file;
    DataError naming ``spec`` when there is none."""
    path = Path(spec)
    if any(char in spec for char in _GLOB_CHARS):
        anchor = Path(path.anchor) if path.is_absolute() else Path()
        pattern = str(path.relative_to(anchor)) if path.is_absolute() else spec
        files = sorted(p for p in anchor.glob(pattern) if p.is_file())
    elif path.is_dir():
        files = sorted(p for p in path.glob("*.bin") if p.is_file())
    elif path.is_file():
        files = [path]
    else:
        raise DataError(f"{flag} {spec} does not exist", hint=DATA_HINT)
    if not files:
        raise DataError(f"{flag} {spec}: no .bin file there", hint=DATA_HINT)
    return files


@dataclass(frozen=True)
class TokenSplits:
    """A dataset's training and validation shards, validated, of one format."""

    train: tuple[TokenShard, ...]
    val: tuple[TokenShard, ...]

    @property
    def format(self) -> ShardFormat:
        return self.train[0].format

    def all(self) -> tuple[TokenShard, ...]:
        return self.train + self.val


def open_splits(data: str, eval_data: str | None = None) -> TokenSplits:
    """The shards of ``--data`` (and ``--eval-data``), split by the validation rule or, with
    ``eval_data``, into all of ``data``'s non-validation files and ``eval_data``'s files."""
    files = resolve_files(data)
    train = [path for path in files if not is_validation(path)]
    if eval_data is None:
        val = [path for path in files if is_validation(path)]
    else:
        val = resolve_files(eval_data, "--eval-data")
    if not train:
        raise DataError(
            f"--data {data}: every file is a validation shard ({', '.join(p.name for p in val)})",
            hint="training shards are the .bin files without 'val' as a word in their name",
        )
    if not val:
        raise DataError(
            f"--data {data}: no validation shard (a .bin file with 'val' as a word of its "
            "name, as llm.c's *_val_*.bin and nanoGPT's val.bin)",
            hint="give the evaluation shards with --eval-data PATH, or rename one shard",
        )
    splits = TokenSplits(
        tuple(inspect_shard(path) for path in train), tuple(inspect_shard(path) for path in val)
    )
    first = splits.train[0]
    for shard in splits.all():
        if shard.format != first.format:
            raise DataError(
                f"--data: {shard.path} is a {shard.format.name} shard, {first.path} a "
                f"{first.format.name} one: one dataset has one format",
                hint="keep shards of one tokenizer and format in a directory of their own",
            )
    return splits


@dataclass(frozen=True)
class Vocabulary:
    """The tokens a dataset's ids come from: ``size`` of them, ``eot`` delimiting documents
    (None when not known), and where that is known from (``source``)."""

    size: int
    eot: int | None
    source: str


def declared_vocabulary(splits: TokenSplits) -> Vocabulary:
    """The data's vocabulary: ``tokenizer.json`` beside the first training shard (``ddpimg
    data tokenize`` writes it), else the format's tokenizer's."""
    path = splits.train[0].path.parent / TOKENIZER_FILE
    if path.exists():
        try:
            recorded = read_json(path, TOKENIZER_FILE_LIMIT)
            size = int(recorded["vocabulary"])
            eot = recorded.get("eot_token")
            eot = None if eot is None else int(eot)
            if not 0 < size <= MAX_VOCABULARY or (eot is not None and not 0 <= eot < size):
                raise ValueError(
                    f"vocabulary {size}, end-of-text token {eot} (a vocabulary has 1 to "
                    f"{MAX_VOCABULARY:,} tokens)"
                )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise DataError(
                f"--data: {path} cannot be read as ddpimg's tokenizer record ({err})",
                hint="write the shards again with `ddpimg data tokenize`, or remove the file",
            ) from err
        source = f"{path} ({recorded.get('tokenizer', 'unknown')})"
        return Vocabulary(size, eot, source)
    shard_format = splits.format
    tokenizer = "LLaMA 3" if shard_format is LLMC_V7 else "GPT-2"
    source = f"{tokenizer}'s, as {shard_format.name} files have"
    return Vocabulary(shard_format.vocabulary, shard_format.eot, source)


def scan_max_token(shard: TokenShard, chunk_tokens: int = 1 << 23) -> int:
    """The largest token of a shard, read in chunks into one buffer (never mapped whole, so
    resident memory stays at one chunk); -1 for an empty shard."""
    largest = -1
    itemsize = shard.format.dtype.itemsize
    buffer = bytearray(chunk_tokens * itemsize)
    with os.fdopen(open_regular(shard.path), "rb", buffering=0) as stream:
        stream.seek(shard.format.header_bytes)
        left = shard.tokens
        while left:
            count = min(left, chunk_tokens)
            got = stream.readinto(memoryview(buffer)[: count * itemsize])
            if got != count * itemsize:
                raise DataError(f"--data: {shard.path} ended early while read", hint="run again")
            view = np.frombuffer(buffer, dtype=shard.format.dtype, count=count)
            largest = max(largest, int(view.max()))
            left -= count
    return largest


class WindowReader:
    """Windows of ``seq_len + 1`` tokens of a list of shards, by window number, each read
    with one ``pread`` into the batch's buffer: the data is never loaded whole, and nothing of
    it stays resident in this process (the page cache keeps what the kernel chooses, shared by
    every process of the node).

    Not a memory map: on current kernels (6.x) a fault maps the page cache's whole folio, up
    to 2 MiB, so every mapped window of a batch held up to 2 MiB resident until the pages were
    handed back (measured: +56 MiB peak for 32 windows of a 80 MB shard), and a map left as it
    is grows to the corpus as an epoch touches every page (the reason nanoGPT maps its file
    anew for every batch). A ``pread`` per window costs about as much as a page fault."""

    def __init__(self, shards: tuple[TokenShard, ...], seq_len: int) -> None:
        self.shards = shards
        self.seq_len = seq_len
        counts = np.array([shard.windows(seq_len) for shard in shards], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts)])
        #: The windows used (the first ``count``; ``--train-samples`` may take fewer).
        self.count = int(self.starts[-1])
        self._files: OrderedDict[int, int] = OrderedDict()

    @property
    def available(self) -> int:
        """Windows in all the shards (``count`` may use fewer)."""
        return int(self.starts[-1])

    def __len__(self) -> int:
        return self.count

    def locate(self, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard, first token) of each window number."""
        shard = np.searchsorted(self.starts, windows, side="right") - 1
        return shard, (windows - self.starts[shard]) * self.seq_len

    def read(self, windows: np.ndarray) -> np.ndarray:
        """The windows, int64 (len(windows), seq_len + 1)."""
        length = self.seq_len + 1
        shards, firsts = self.locate(np.asarray(windows, dtype=np.int64))
        dtype = self.shards[0].format.dtype if self.shards else np.dtype("<u2")
        raw = np.empty((len(windows), length), dtype=dtype)
        size = length * dtype.itemsize
        for row, (shard, first) in enumerate(zip(shards.tolist(), firsts.tolist(), strict=True)):
            shard_format = self.shards[shard].format
            offset = shard_format.header_bytes + first * dtype.itemsize
            got = os.preadv(self._open(shard), [memoryview(raw[row]).cast("B")], offset)
            if got != size:
                raise DataError(
                    f"--data: {self.shards[shard].path} ended at byte {offset + got}, inside "
                    "a window its size promised",
                    hint="the file changed while training: do not rewrite shards of a running job",
                )
        return raw.astype(np.int64)

    def _open(self, index: int) -> int:
        found = self._files.get(index)
        if found is not None:
            self._files.move_to_end(index)
            return found
        descriptor = open_regular(self.shards[index].path)
        self._files[index] = descriptor
        if len(self._files) > OPEN_SHARDS:
            os.close(self._files.popitem(last=False)[1])
        return descriptor

    def close(self) -> None:
        while self._files:
            os.close(self._files.popitem()[1])
