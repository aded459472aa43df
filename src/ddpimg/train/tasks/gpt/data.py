"""The ``gpt`` trainer's token sequences: ``synthetic`` ones generated on the device, or
token shards on storage (llm.c's or nanoGPT's ``.bin`` files, ``ddpimg.data.tokenshards``),
read window by window as the steps need them.

A sample is a window of ``--seq-len`` + 1 tokens: the inputs are its first ``--seq-len``
tokens, the targets the same shifted by one.

* Synthetic sequences walk a fixed random Markov chain over the model's vocabulary: every
  token has four possible successors, drawn from a Zipf-like distribution, so a model
  first learns the frequent tokens (the loss drops within a few steps) and then the
  transitions (down to ln 4 nats). They are generated in chunks from generators seeded by
  (split, chunk), so every rank and run gets the same sequences, and the first N do not
  depend on how many are asked for.
* Shards: the training windows are those of every training shard, in shard order, and
  the loop's order (a permutation drawn from (seed, epoch)) picks among all of them; each
  rank reads only its own rows of a step (a ``pread`` a window, nothing kept resident).
  Before the first step every token is checked against the data's vocabulary (scanned
  once, kept in the index: ``ddpimg.data.tokenindex``), and the model's vocabulary is the
  data's (which the model pads inside, unseen: ``model.Gpt``) unless ``--init-from`` fixes
  it.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ddpimg.data import tokenindex
from ddpimg.data.tokenshards import (
    TokenSplits,
    Vocabulary,
    WindowReader,
    declared_vocabulary,
    open_splits,
)
from ddpimg.errors import DataError
from ddpimg.train.coordination import prepare_on_main
from ddpimg.train.seeding import derive_seed
from ddpimg.train.tasks.base import InMemoryDataset
from ddpimg.train.tasks.datasets import sample_count

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.sharding import BatchPlan
    from ddpimg.train.tasks.base import Batch

SYNTHETIC_TRAIN = 10_000
SYNTHETIC_EVAL = 500

_SUCCESSORS = 4
_CHUNK = 256
_SYNTHETIC_SEED = 20_240_602


def synthetic_tokens(
    seq_len: int,
    vocab: int,
    *,
    train_samples: int | None,
    eval_samples: int | None,
    device: torch.device,
) -> tuple[TokenSet, TokenSet]:
    """The synthetic training and evaluation windows on ``device``."""
    source = "the synthetic token set"
    train_count = sample_count(
        SYNTHETIC_TRAIN, train_samples, "--train-samples", "training", source
    )
    eval_count = sample_count(SYNTHETIC_EVAL, eval_samples, "--eval-samples", "evaluation", source)
    train = synthetic_sequences(0, train_count, seq_len, vocab, device)
    test = synthetic_sequences(1, eval_count, seq_len, vocab, device)
    return TokenSet(train), TokenSet(test)


@dataclass(frozen=True)
class TokenSet(InMemoryDataset):
    """``sequences``: int64 (N, seq_len + 1) token windows, on one device."""

    sequences: torch.Tensor

    def __len__(self) -> int:
        return int(self.sequences.shape[0])

    @property
    def device(self) -> torch.device:
        return self.sequences.device

    def batch(self, rows: torch.Tensor | slice) -> tuple[torch.Tensor, torch.Tensor]:
        """Input tokens and next-token targets, both (N, seq_len)."""
        windows = self.sequences[rows]
        return windows[:, :-1], windows[:, 1:]


def synthetic_sequences(
    split: int, count: int, seq_len: int, vocab: int, device: torch.device | None = None
) -> torch.Tensor:
    """The first ``count`` synthetic sequences of ``split`` (0 train, 1 eval): int64
    (count, seq_len + 1) on ``device`` (default the CPU).

    The random draws happen on the CPU; the walk itself, one gather per position over all
    sequences at once, runs on the device (integer gathers: the same result anywhere)."""
    frequency = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    generator = torch.Generator()
    generator.manual_seed(derive_seed(_SYNTHETIC_SEED, "successors", vocab))
    # Token t's successors are entries t*4 .. t*4+3.
    successors = torch.multinomial(
        frequency, vocab * _SUCCESSORS, replacement=True, generator=generator
    )
    starts, choices = [], []
    for chunk in range(-(-count // _CHUNK)):
        generator.manual_seed(derive_seed(_SYNTHETIC_SEED, "walks", split, vocab, seq_len, chunk))
        starts.append(torch.multinomial(frequency, _CHUNK, replacement=True, generator=generator))
        choices.append(
            torch.randint(_SUCCESSORS, (_CHUNK, seq_len), generator=generator, dtype=torch.uint8)
        )
    successors = successors.to(device)
    # Position-major, so every step reads and writes contiguous rows.
    choice = torch.cat(choices)[:count].t().contiguous().to(device)
    walk = torch.empty((seq_len + 1, count), dtype=torch.int64, device=device)
    walk[0] = torch.cat(starts)[:count].to(device)
    for position in range(seq_len):
        following = walk[position] * _SUCCESSORS + choice[position]
        torch.index_select(successors, 0, following, out=walk[position + 1])
    return walk.t().contiguous()


@dataclass(frozen=True)
class ShardData:
    """A token dataset's shards and the vocabulary its tokens come from."""

    splits: TokenSplits
    vocabulary: Vocabulary

    @classmethod
    def open(cls, data: str, eval_data: str | None) -> ShardData:
        splits = open_splits(data, eval_data)
        return cls(splits, declared_vocabulary(splits))

    def check_tokens(self, out: Path, ctx: DistContext, limit: int, limit_source: str) -> None:
        """Every token below ``limit`` (collective: rank 0 scans what the index does not
        know); DataError naming the first shard with a token beyond it."""
        prepare_on_main(ctx, lambda: tokenindex.prepare(self.splits, out, sys.stderr))
        maxima = tokenindex.max_tokens(self.splits, out)
        if maxima is None:
            raise DataError(
                f"--data: the token index of {tokenindex.root_of(self.splits)} changed while "
                "it was read",
                hint="do not change the dataset while a run starts; run again",
            )
        for shard in self.splits.all():
            if maxima[shard.path] >= limit:
                raise DataError(
                    f"--data: {shard.path} holds token {maxima[shard.path]}, beyond "
                    f"{limit_source} of {limit} tokens",
                    hint="tokenize the data with the model's tokenizer; a token far beyond it "
                    f"means the files are not {self.splits.format.name} shards of that tokenizer",
                )

    def datasets(
        self,
        seq_len: int,
        *,
        train_samples: int | None,
        eval_samples: int | None,
        device: torch.device,
    ) -> tuple[TokenWindows, TokenWindows]:
        readers = []
        for split, shards, requested, flag, what in (
            ("train", self.splits.train, train_samples, "--train-samples", "training"),
            ("val", self.splits.val, eval_samples, "--eval-samples", "evaluation"),
        ):
            reader = WindowReader(shards, seq_len)
            if reader.available == 0:
                tokens = sum(shard.tokens for shard in shards)
                raise DataError(
                    f"--data: the {split} shards hold {tokens} tokens, not one window of "
                    f"--seq-len {seq_len} + 1",
                    hint="a shorter --seq-len, or more data",
                )
            source = f"the {split} shards of --data"
            reader.count = sample_count(reader.available, requested, flag, what, source)
            readers.append(reader)
        return TokenWindows(readers[0], device), TokenWindows(readers[1], device)

    def facts(self) -> dict[str, Any]:
        """What manifest.json records: the files, format, token and window counts."""
        splits = self.splits
        return {
            "source": str(splits.train[0].path.parent.resolve()),
            "format": splits.format.name,
            "train_shards": [str(shard.path) for shard in splits.train],
            "eval_shards": [str(shard.path) for shard in splits.val],
            "train_tokens": sum(shard.tokens for shard in splits.train),
            "eval_tokens": sum(shard.tokens for shard in splits.val),
            "vocabulary_from": self.vocabulary.source,
            "eot_token": self.vocabulary.eot,
        }


class TokenWindows:
    """One split of a shard dataset: a ``Dataset`` that reads each batch's windows from
    the shards (on a GPU through pinned memory, copied without blocking)."""

    def __init__(self, reader: WindowReader, device: torch.device) -> None:
        self.reader = reader
        self.device = device

    def __len__(self) -> int:
        return len(self.reader)

    def batches(self, plan: BatchPlan) -> Generator[Batch]:
        on_gpu = self.device.type == "cuda"
        for where in plan.slices:
            windows = torch.from_numpy(self.reader.read(plan.order[where].numpy()))
            if on_gpu:
                windows = windows.pin_memory().to(self.device, non_blocking=True)
            yield windows[:, :-1], windows[:, 1:]

    def skipped(self) -> int:
        return 0
