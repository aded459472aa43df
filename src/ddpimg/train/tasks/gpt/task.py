"""``train gpt``: a GPT-2-style language model (``ddpimg.train.models.gpt``) trained on
next-token prediction, with AdamW as GPT-2 / nanoGPT use it (betas 0.9/0.95, weight decay
0.1 on matrices only, fused on CUDA).

Data (``--data``): ``synthetic`` token sequences, or a UTF-8 text file read as bytes (the
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

A sample's loss is the mean over its tokens, its "accuracy" the fraction of tokens
predicted right, so the reported figures are per-token means.

Throughput: tokens/s, and on a GPU the model-FLOPs utilisation: training FLOPs per token
(``Gpt.flops_per_token``) x tokens/s / (peak x world size), against the peak bf16 FLOP/s
of the device (``PEAK_BF16_FLOPS``; ``mfu`` is null for a GPU not in the table).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from ddpimg.errors import DataError, DdpimgError
from ddpimg.train.config import SYNTHETIC
from ddpimg.train.models.gpt import Gpt
from ddpimg.train.seeding import derive_seed
from ddpimg.train.tasks.datasets import sample_count
from ddpimg.train.tasks.gpt import DEFAULT_SIZE, SIZES

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.dropout import DropoutContext
    from ddpimg.train.tasks.base import Dataset

BETAS = (0.9, 0.95)
WEIGHT_DECAY = 0.1
BYTE_VOCAB = 256
SYNTHETIC_TRAIN = 10_000
SYNTHETIC_EVAL = 500
EVAL_FRACTION = 10  # the last 1/10 of a text file

# Dense bf16 tensor-core peaks (vendor data sheets), matched in order against the device
# name. V100 has no bf16: its figure is the fp16 peak.
PEAK_BF16_FLOPS = (
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("H200", 989e12),
    ("A100", 312e12),
    ("V100", 125e12),
)

_SUCCESSORS = 4
_CHUNK = 256
_SYNTHETIC_SEED = 20_240_602


def peak_bf16_flops(device_name: str) -> float | None:
    """The device's peak bf16 FLOP/s from ``PEAK_BF16_FLOPS``; None when not listed."""
    for key, flops in PEAK_BF16_FLOPS:
        if key in device_name:
            return flops
    return None


@dataclass(frozen=True)
class TokenSet:
    """``sequences``: int64 (N, seq_len + 1) token windows."""

    sequences: torch.Tensor

    def __len__(self) -> int:
        return int(self.sequences.shape[0])

    def to(self, device: torch.device) -> TokenSet:
        return TokenSet(self.sequences.to(device))

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


class GptTask:
    """``train gpt``."""

    def __init__(self, config: TrainConfig, ctx: DistContext) -> None:
        self.config = config
        self.device = ctx.device
        self.size = config.size or DEFAULT_SIZE
        shape = SIZES[self.size].shape
        if config.data != SYNTHETIC:
            shape = replace(shape, vocab_size=BYTE_VOCAB)
        self.shape = shape
        self.seq_len = config.seq_len or shape.block_size
        if self.seq_len > shape.block_size:
            raise DdpimgError(
                f"--seq-len {self.seq_len} is longer than the context of --size {self.size} "
                f"({shape.block_size} tokens)",
                hint=f"give at most {shape.block_size}, or leave --seq-len out",
            )
        self.eval_batch_size = SIZES[self.size].eval_batch_size
        self._flops_per_token = 0.0
        self._on_gpu = self.device.type == "cuda"
        self._peak_flops = (
            peak_bf16_flops(torch.cuda.get_device_name(self.device)) if self._on_gpu else None
        )

    def load(self) -> tuple[Dataset, Dataset]:
        config, device = self.config, self.device
        if config.data == SYNTHETIC:
            source = "the synthetic token set"
            train_count = sample_count(
                SYNTHETIC_TRAIN, config.train_samples, "--train-samples", "training", source
            )
            eval_count = sample_count(
                SYNTHETIC_EVAL, config.eval_samples, "--eval-samples", "evaluation", source
            )
            vocab = self.shape.vocab_size
            train = synthetic_sequences(0, train_count, self.seq_len, vocab, device)
            test = synthetic_sequences(1, eval_count, self.seq_len, vocab, device)
        else:
            path = Path(config.data)
            tokens = read_text_bytes(path)
            held_out = max(len(tokens) // EVAL_FRACTION, self.seq_len + 1)
            train_all = windows(tokens[:-held_out], self.seq_len)
            test_all = windows(tokens[-held_out:], self.seq_len)
            if len(train_all) == 0:
                raise DataError(
                    f"--data {path}: {len(tokens)} bytes leave no training sample of "
                    f"--seq-len {self.seq_len} + 1 bytes once the last tenth is held out "
                    "for evaluation",
                    hint=f"use a file of at least {2 * (self.seq_len + 1)} bytes, or a "
                    "shorter --seq-len",
                )
            source = str(path)
            train = train_all[
                : sample_count(
                    len(train_all), config.train_samples, "--train-samples", "training", source
                )
            ]
            test = test_all[
                : sample_count(
                    len(test_all), config.eval_samples, "--eval-samples", "evaluation", source
                )
            ]
        return TokenSet(train).to(device), TokenSet(test).to(device)

    def build_model(self, dropout: DropoutContext) -> nn.Module:
        model = Gpt(self.shape).to(self.device)
        self._flops_per_token = model.flops_per_token(self.seq_len)
        return model

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # float(): under bf16 autocast the logits are bf16; the loss is taken in fp32.
        per_token = F.cross_entropy(
            output.flatten(0, 1).float(), target.flatten(), reduction="none"
        )
        return per_token.view(target.shape).mean(dim=1)

    def correct(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (output.argmax(dim=-1) == target).float().mean(dim=1).sum()

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        parameters = list(model.parameters())
        groups = [
            # Matrices (linear and embedding weights) decay; biases and LayerNorms do not.
            {"params": [p for p in parameters if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
            {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(
            groups,
            lr=self.config.learning_rate(SIZES[self.size].learning_rate),
            betas=BETAS,
            fused=parameters[0].device.type == "cuda",
        )

    def throughput(self, samples_per_s: float, world_size: int) -> dict[str, float | None]:
        tokens_per_s = samples_per_s * self.seq_len
        rates: dict[str, float | None] = {"tokens_per_s": tokens_per_s}
        if self._on_gpu:
            rates["mfu"] = (
                None
                if self._peak_flops is None
                else tokens_per_s * self._flops_per_token / (self._peak_flops * world_size)
            )
        return rates
