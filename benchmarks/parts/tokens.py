"""Token data for ``train gpt``: reading shards, memory, tokenizing.

* Throughput: ``gpt --size tiny`` steady tokens/s reading llm.c shards from disk against
  synthetic sequences generated on the device, same vocabulary (256, declared in the
  shards' ``tokenizer.json``), batch and sequence length; interleaved rounds. The tiny model
  steps in milliseconds on a CPU, so any cost of reading windows shows at its largest here.
* Memory: the peak resident set (``wait4``'s ``ru_maxrss``) of a 1-process run on a corpus
  of 2M and of 40M tokens, first run included (it scans the corpus once for its largest
  token), 400 steps of random windows over either. ``ru_maxrss`` counts the parent's resident
  set at the ``exec`` too, so this driver writes the corpora in chunks and holds none.
* Tokenizing: ``ddpimg data tokenize`` against nanoGPT's ``data/openwebtext/prepare.py``
  way (``encode_ordinary`` per document plus the end-of-text token, ``num_proc`` processes
  mapping over the documents, then the ids copied into a uint16 memmap; without the
  Hugging Face ``datasets`` layer, which only adds to its time), same GPT-2 encoding, same
  JSONL documents, same number of processes. GPT-2's encoding files are needed and never
  downloaded: ``DDPIMG_BENCH_ENCODING_DIR`` names a directory with them (vocab.bpe +
  encoder.json, or gpt2.tiktoken), else tiktoken's cache must hold them; otherwise the row
  says it was skipped.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from parts.common import PYTHON, Row, interleaved, log, peak_rss_kib

SEQ_LEN, BATCH, STEPS, WARMUP = 64, 32, 300, 30
RSS_SIZES = (2_000_000, 40_000_000)
RSS_STEPS = 400
TOKENIZE_MB = 16
# English-like text for the tokenizer: common words, names, numbers and punctuation.
VOCABULARY = (
    "the of and to in a is that for it as was with be by on not he I this are or his from at "
    "which but have an they you were her she there been one all we their has would when if so "
    "no will more can out up about into them than only other its new some could time these two "
    "may first then do any like my now over such our man me even most made after also did many "
    "before must through back years where much your way well down should because each just "
    "those people Mr how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three distribution tokenizer "
    "Helsinki Princeton cluster gradient 2024 3.14 (see below) -- don't it's they're"
)
WORDS = VOCABULARY.split()


def corpus(root: Path, tokens: int) -> Path:
    """An llm.c corpus of ``tokens`` random tokens of a vocabulary of 256 (as its
    tokenizer.json says): a 50th for validation, the rest one training shard. Written a
    million tokens at a time: a child's peak RSS (``wait4``) starts from this process's at
    the ``exec``, so this process must never hold a corpus."""
    from ddpimg.data.tokenshards import HEADER_INTS, LLMC_V1

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    val = tokens // 50
    for name, count in (("bench_val_000000.bin", val), ("bench_train_000000.bin", tokens - val)):
        header = np.zeros(HEADER_INTS, dtype="<i4")
        header[:3] = (LLMC_V1.magic, LLMC_V1.version, count)
        with (root / name).open("wb") as stream:
            stream.write(header.tobytes())
            for first in range(0, count, 1 << 20):
                size = min(1 << 20, count - first)
                stream.write(rng.integers(0, 256, size=size, dtype=np.uint16).tobytes())
    (root / "tokenizer.json").write_text(json.dumps({"tokenizer": "bench", "vocabulary": 256}))
    return root


def train_command(data: str, out: Path, steps: int, warmup: int) -> list[str]:
    return [
        PYTHON, "-m", "ddpimg", "train", "gpt", "--size", "tiny", "--data", data,
        "--seq-len", str(SEQ_LEN), "--batch-size", str(BATCH), "--max-steps", str(steps),
        "--warmup-steps", str(warmup), "--log-every", str(steps), "--epochs", "1",
        "--eval-samples", "64", "--out", str(out), "--resume", "none",
    ]  # fmt: skip


def throughput(repeats: int, scratch: Path) -> tuple[list[Row], dict[str, Any]]:
    data = str(corpus(scratch / "throughput", 4_000_000))

    def measure(source: str) -> float:
        with tempfile.TemporaryDirectory(prefix="ddpimg-bench-") as out:
            summary, _ = peak_rss_kib(train_command(source, Path(out), STEPS, WARMUP))
        return float(summary["tokens_per_s"])

    rounds = interleaved(
        {"shards": lambda: measure(data), "synthetic": lambda: measure("synthetic")},
        repeats,
        "tokens/s",
    )
    shards = statistics.median(r["shards"] for r in rounds)
    synthetic = statistics.median(r["synthetic"] for r in rounds)
    ratio = statistics.median(r["shards"] / r["synthetic"] for r in rounds)
    row = (
        f"gpt-tiny tokens/s, llm.c shards / synthetic (batch {BATCH} x {SEQ_LEN}, {STEPS} "
        f"steps, {WARMUP} warm-up, {repeats} rounds)",
        f"**{ratio:.3f}** ({shards:,.0f} vs {synthetic:,.0f} tokens/s)",
        ">= 0.95",
    )
    return [row], {"rounds": rounds, "ratio": ratio}


def memory(scratch: Path) -> tuple[list[Row], dict[str, Any]]:
    peaks = {}
    for tokens in RSS_SIZES:
        data = str(corpus(scratch / f"rss-{tokens}", tokens))
        with tempfile.TemporaryDirectory(prefix="ddpimg-bench-") as out:
            _, peak = peak_rss_kib(train_command(data, Path(out), RSS_STEPS, 10))
        peaks[tokens] = peak / 1024
        log(f"peak RSS with {tokens:,} tokens: {peaks[tokens]:.0f} MiB")
    small, large = (peaks[size] for size in RSS_SIZES)
    growth = large / small - 1
    row = (
        f"gpt-tiny peak RSS, {RSS_SIZES[1] // 1_000_000}M vs {RSS_SIZES[0] // 1_000_000}M-token "
        f"corpus ({RSS_STEPS} steps, first run: the corpus scan included)",
        f"**{growth:+.1%}** ({large:.0f} vs {small:.0f} MiB)",
        "< 25%",
    )
    return [row], {"peak_mib": {str(k): v for k, v in peaks.items()}, "growth": growth}


def documents_file(path: Path, megabytes: int) -> int:
    """JSONL documents of English-like text, ``megabytes`` MB; returns their count."""
    rng = random.Random(0)
    count, size = 0, 0
    with path.open("w", encoding="utf-8") as stream:
        while size < megabytes * 1_000_000:
            words = rng.choices(WORDS, k=rng.randint(100, 1500))
            text = " ".join(words).replace(" .", ".") + "."
            line = json.dumps({"text": text}) + "\n"
            stream.write(line)
            size += len(line)
            count += 1
    return count


_ENCODING: dict[str, Any] = {}


def _nanogpt_process(text: str) -> list[int]:
    # nanoGPT's prepare.py: ids = enc.encode_ordinary(example['text']); ids.append(enc.eot_token)
    encoding = _ENCODING["encoding"]
    ids: list[int] = encoding.encode_ordinary(text)
    ids.append(encoding.eot_token)
    return ids


def nanogpt_way(documents: Path, out: Path, encoding: Any, workers: int) -> int:
    """Tokenize as nanoGPT's prepare.py does; the number of tokens written."""
    texts = [json.loads(line)["text"] for line in documents.open(encoding="utf-8")]
    _ENCODING["encoding"] = encoding
    context = multiprocessing.get_context("fork")
    with context.Pool(workers) as pool:
        # datasets' map(num_proc=N) hands each process one contiguous shard of the rows.
        tokenized = pool.map(_nanogpt_process, texts, chunksize=-(-len(texts) // workers))
    total = sum(len(ids) for ids in tokenized)
    array = np.memmap(out, dtype=np.uint16, mode="w+", shape=(total,))
    index = 0
    for ids in tokenized:
        array[index : index + len(ids)] = ids
        index += len(ids)
    array.flush()
    return total


def tokenizing(repeats: int, scratch: Path) -> tuple[list[Row], dict[str, Any]]:
    from ddpimg.data.tokenize import TokenizeOptions, tokenize
    from ddpimg.data.tokenizers import TiktokenTokenizer, load_tokenizer
    from ddpimg.errors import DdpimgError

    given = os.environ.get("DDPIMG_BENCH_ENCODING_DIR")
    encoding_dir = Path(given) if given else None
    try:
        tokenizer = load_tokenizer("gpt2", encoding_dir)
    except DdpimgError as err:
        reason = f"skipped: no GPT-2 encoding files ({err.message}); set DDPIMG_BENCH_ENCODING_DIR"
        return [("tokenize throughput, ddpimg / nanoGPT's prepare.py way", reason, "")], {}
    assert isinstance(tokenizer, TiktokenTokenizer)
    workers = len(os.sched_getaffinity(0))
    documents = scratch / "docs" / "docs.jsonl"
    documents.parent.mkdir(parents=True)
    count = documents_file(documents, TOKENIZE_MB)

    def ours() -> float:
        with tempfile.TemporaryDirectory(prefix="ddpimg-bench-") as out:
            options = TokenizeOptions(encoding_dir=encoding_dir, workers=workers)
            began = time.perf_counter()
            result = tokenize([documents], Path(out) / "shards", options, io.StringIO())
            seconds = time.perf_counter() - began
        return (result.train.tokens + result.val.tokens) / seconds

    def theirs() -> float:
        with tempfile.TemporaryDirectory(prefix="ddpimg-bench-") as out:
            began = time.perf_counter()
            tokens = nanogpt_way(documents, Path(out) / "train.bin", tokenizer.encoding, workers)
            seconds = time.perf_counter() - began
        return tokens / seconds

    rounds = interleaved({"ddpimg": ours, "nanogpt": theirs}, repeats, "tokenize tokens/s")
    mine = statistics.median(r["ddpimg"] for r in rounds)
    reference = statistics.median(r["nanogpt"] for r in rounds)
    ratio = statistics.median(r["ddpimg"] / r["nanogpt"] for r in rounds)
    row = (
        f"tokenize throughput, ddpimg data tokenize / nanoGPT's prepare.py way (GPT-2 encoding, "
        f"{TOKENIZE_MB} MB of JSONL, {count:,} documents, {workers} processes, {repeats} rounds)",
        f"**{ratio:.2f}x** ({mine:,.0f} vs {reference:,.0f} tokens/s)",
        ">= 1 (same encoding, same machine)",
    )
    return [row], {"rounds": rounds, "ratio": ratio, "documents": count}


def run(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    record: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ddpimg-bench-tokens-") as tmp:
        scratch = Path(tmp)
        parts: dict[str, Callable[[], tuple[list[Row], dict[str, Any]]]] = {
            "throughput": lambda: throughput(repeats, scratch),
            "memory": lambda: memory(scratch),
            "tokenize": lambda: tokenizing(repeats, scratch),
        }
        for name, part in parts.items():
            part_rows, part_record = part()
            rows += part_rows
            record[name] = part_record
    return rows, record
