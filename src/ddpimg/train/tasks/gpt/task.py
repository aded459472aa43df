"""``train gpt``: a GPT-2-style language model (``model``) trained on
next-token prediction, with AdamW as GPT-2 / nanoGPT use it (betas 0.9/0.95, weight decay
0.1 on matrices only, fused on CUDA).

Data (``--data``, ``data``): synthetic token sequences, or llm.c / nanoGPT token shards.
A sample is a window of ``--seq-len`` + 1 tokens: the inputs are its first ``--seq-len``
tokens, the targets the same shifted by one.

Weights: freshly initialised at ``--size``, or ``--init-from`` a Hugging Face GPT-2
directory (``hf``), whose config then gives the shape and the vocabulary.

Vocabulary: the data's (synthetic: ``--size``'s; shards: their tokenizer's), or
``--init-from``'s. The model pads it to a multiple of 64 inside (``model.Gpt``) and never
predicts a padding id; the shape in manifest.json has the real one.

A sample's loss is the mean over its tokens, its "accuracy" the fraction of tokens
predicted right, so the reported figures are per-token means.

Throughput: tokens/s, and on a GPU the model-FLOPs utilisation: training FLOPs per token
(``Gpt.flops_per_token``) x tokens/s / (peak x world size), against the peak bf16 FLOP/s
of the device (``PEAK_BF16_FLOPS``; ``mfu`` is null for a GPU not in the table).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from ddpimg.errors import DdpimgError
from ddpimg.train.config import SYNTHETIC
from ddpimg.train.tasks.gpt import hf
from ddpimg.train.tasks.gpt.config import DEFAULT_SIZE, SIZES
from ddpimg.train.tasks.gpt.data import ShardData, synthetic_tokens
from ddpimg.train.tasks.gpt.model import Gpt
from ddpimg.train.tasks.gpt.options import GptOptions

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.dropout import DropoutContext
    from ddpimg.train.tasks.base import Dataset
    from ddpimg.train.tasks.gpt.config import GptConfig

BETAS = (0.9, 0.95)
WEIGHT_DECAY = 0.1

# Dense bf16 tensor-core peaks (vendor data sheets), matched in order against the device
# name. V100 has no bf16: its figure is the fp16 peak.
PEAK_BF16_FLOPS = (
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("H200", 989e12),
    ("A100", 312e12),
    ("V100", 125e12),
)


def peak_bf16_flops(device_name: str) -> float | None:
    """The device's peak bf16 FLOP/s from ``PEAK_BF16_FLOPS``; None when not listed."""
    for key, flops in PEAK_BF16_FLOPS:
        if key in device_name:
            return flops
    return None


class GptTask:
    """``train gpt``."""

    def __init__(self, config: TrainConfig, ctx: DistContext) -> None:
        self.config = config
        self.ctx = ctx
        self.device = ctx.device
        options = GptOptions.of(config)
        self.size = options.size or DEFAULT_SIZE
        self.pretrained = None if options.init_from is None else Path(options.init_from)
        self.shards = (
            None if config.data == SYNTHETIC else ShardData.open(config.data, options.eval_data)
        )
        self.shape = self.model_shape()
        self.seq_len = options.seq_len or self.shape.block_size
        if self.seq_len > self.shape.block_size:
            where = (
                f"--size {self.size}"
                if self.pretrained is None
                else f"--init-from {self.pretrained}"
            )
            raise DdpimgError(
                f"--seq-len {self.seq_len} is longer than the context of {where} "
                f"({self.shape.block_size} tokens)",
                hint=f"give at most {self.shape.block_size}, or leave --seq-len out",
            )
        self.eval_batch_size = SIZES[self.size].eval_batch_size
        self._flops_per_token = 0.0
        self._on_gpu = self.device.type == "cuda"
        self._peak_flops = (
            peak_bf16_flops(torch.cuda.get_device_name(self.device)) if self._on_gpu else None
        )

    def model_shape(self) -> GptConfig:
        """``--init-from``'s shape, or ``--size``'s with the data's vocabulary (the model
        pads it itself: ``model.Gpt``)."""
        if self.pretrained is not None:
            return hf.read_config(self.pretrained)
        shape = SIZES[self.size].shape
        if self.shards is None:
            return shape
        return replace(shape, vocab_size=self.shards.vocabulary.size)

    @property
    def vocabulary(self) -> int:
        """The tokens the model reads and predicts, unpadded: what manifest.json records
        and an export keeps."""
        return self.shape.vocab_size

    def datasets(self) -> tuple[Dataset, Dataset]:
        return self._datasets

    @cached_property
    def _datasets(self) -> tuple[Dataset, Dataset]:
        config = self.config
        if self.shards is None:
            return synthetic_tokens(
                self.seq_len,
                self.shape.vocab_size,
                train_samples=config.train_samples,
                eval_samples=config.first_eval_samples,
                device=self.device,
            )
        limit_source = (
            f"the data's vocabulary ({self.shards.vocabulary.source})"
            if self.pretrained is None
            else f"the vocabulary of --init-from {self.pretrained}"
        )
        self.shards.check_tokens(config.out, self.ctx, self.vocabulary, limit_source)
        return self.shards.datasets(
            self.seq_len,
            train_samples=config.train_samples,
            eval_samples=config.first_eval_samples,
            device=self.device,
        )

    def data_facts(self) -> dict[str, Any]:
        train, test = self._datasets
        facts = {"source": SYNTHETIC} if self.shards is None else self.shards.facts()
        return facts | {
            "train_samples": len(train),
            "eval_samples": len(test),
            "vocabulary": self.vocabulary,
            "model": asdict(self.shape),
            "init_from": None if self.pretrained is None else str(self.pretrained.resolve()),
        }

    def build_model(self, dropout: DropoutContext) -> nn.Module:
        model = Gpt(self.shape)
        if self.pretrained is not None:
            hf.load_pretrained(model, self.pretrained)
        model = model.to(self.device)
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

    def fingerprint(self) -> dict[str, int]:
        # The model's rows are the vocabulary padded: vocabularies of 50257 and 50300 give
        # checkpoints of one shape, which only the recorded vocabulary tells apart.
        return {"vocabulary": self.vocabulary}  # and no BatchNorm

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
