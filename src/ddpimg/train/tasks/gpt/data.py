"""The ``gpt`` trainer's token sequences: ``synthetic`` ones generated on the device, or a
UTF-8 text file read as bytes.

``synthetic`` token sequences, or a UTF-8 text file read as bytes (the
vocabulary is then the 256 byte values). A sample is a window of ``--seq-len`` + 1 tokens:
the inputs are its first ``--seq-len`` tokens, the targets the same shifted by one.

* Synthetic sequences walk a fixed random Markov chain over the model's vocabulary: every
  token has four possible successors, drawn from a Zipf-like distribution, so a model
  first learns the frequent tokens (the loss drops within a few steps) and then the
  transitions (down to ln 4 nats). They are generated in chunks from generators seeded by
  (split, chunk), so every rank and run gets the same sequences, and the first N do not
  depend on how many are asked for.
* A text file is cut into consecutive windows (each overlapping the next by the one token
  that is the last target); the last tenth of the file is the evaluation set.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ddpimg.errors import DataError
from ddpimg.train.config import SYNTHETIC
from ddpimg.train.seeding import derive_seed
from ddpimg.train.tasks.base import InMemoryDataset
from ddpimg.train.tasks.datasets import sample_count

BYTE_VOCAB = 256
SYNTHETIC_TRAIN = 10_000
SYNTHETIC_EVAL = 500
EVAL_FRACTION = 10  # the last 1/10 of a text file

_SUCCESSORS = 4
_CHUNK = 256
_SYNTHETIC_SEED = 20_240_602


def data_vocabulary(data: str, model_vocabulary: int) -> int:
    """The vocabulary the model needs for ``--data``: its own for synthetic sequences, the
    256 byte values for a text file."""
    return model_vocabulary if data == SYNTHETIC else BYTE_VOCAB


def load_tokens(
    data: str,
    seq_len: int,
    vocab: int,
    *,
    train_samples: int | None,
    eval_samples: int | None,
    device: torch.device,
) -> tuple[TokenSet, TokenSet]:
    """The training and evaluation windows of ``--data`` on ``device``."""
    if data == SYNTHETIC:
        source = "the synthetic token set"
        train_count = sample_count(
            SYNTHETIC_TRAIN, train_samples, "--train-samples", "training", source
        )
        eval_count = sample_count(
            SYNTHETIC_EVAL, eval_samples, "--eval-samples", "evaluation", source
        )
        train = synthetic_sequences(0, train_count, seq_len, vocab, device)
        test = synthetic_sequences(1, eval_count, seq_len, vocab, device)
        return TokenSet(train), TokenSet(test)
    path = Path(data)
    tokens = read_text_bytes(path)
    held_out = max(len(tokens) // EVAL_FRACTION, seq_len + 1)
    train_all = windows(tokens[:-held_out], seq_len)
    test_all = windows(tokens[-held_out:], seq_len)
    if len(train_all) == 0:
        raise DataError(
            f"--data {path}: {len(tokens)} bytes leave no training sample of "
            f"--seq-len {seq_len} + 1 bytes once the last tenth is held out for evaluation",
            hint=f"use a file of at least {2 * (seq_len + 1)} bytes, or a shorter --seq-len",
        )
    source = str(path)
    train = train_all[
        : sample_count(len(train_all), train_samples, "--train-samples", "training", source)
    ]
    test = test_all[
        : sample_count(len(test_all), eval_samples, "--eval-samples", "evaluation", source)
    ]
    return TokenSet(train.to(device)), TokenSet(test.to(device))


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


def read_text_bytes(path: Path) -> torch.Tensor:
    """The bytes of a UTF-8 text file as int64 tokens; DataError naming the file when it is
    missing, unreadable or not UTF-8."""
    if not path.is_file():
        state = "is not a file" if path.exists() else "does not exist"
        raise DataError(
            f"--data {path} {state}",
            hint="give a UTF-8 text file for gpt, or --data synthetic",
        )
    try:
        content = path.read_bytes()
    except OSError as err:
        raise DataError(
            f"--data {path}: cannot be read ({err.strerror})",
            hint="check the file's permissions, or use --data synthetic",
        ) from err
    try:
        content.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(
            f"--data {path}: not UTF-8 text: byte {err.start} is 0x{content[err.start]:02x} "
            f"({err.reason})",
            hint="convert it, e.g. iconv -f latin1 -t utf-8, or use --data synthetic",
        ) from err
    return torch.frombuffer(bytearray(content), dtype=torch.uint8).long()


def windows(tokens: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Consecutive windows of seq_len + 1 tokens, each starting at the previous one's last
    token: (N, seq_len + 1), N possibly 0."""
    if len(tokens) < seq_len + 1:
        return torch.empty((0, seq_len + 1), dtype=torch.int64)
    return tokens.unfold(0, seq_len + 1, seq_len).contiguous()
