"""A GPT-2-style decoder-only language model in plain torch, the ``gpt`` trainer's model;
its shapes (``GptConfig``, one per ``--size``) are in ``ddpimg.train.tasks.gpt.config``.

GPT-2's architecture (Radford et al. 2019) as nanoGPT writes it: token and position
embeddings, pre-LayerNorm blocks of causal self-attention and a 4x-wide GELU MLP, a final
LayerNorm, and an output projection tied to the token embedding. Attention runs through
``F.scaled_dot_product_attention(is_causal=True)``, which picks the flash or
memory-efficient kernel on a GPU. GPT-2's initialisation: every weight from N(0, 0.02),
biases zero, and the projections back into the residual stream scaled by 1/sqrt(2 x layers).

The token embedding and the output layer have ``GptConfig.padded_vocab_size`` rows (the
vocabulary padded to a multiple of 64, nanoGPT's 50304 for GPT-2's 50257: faster matmuls),
but the logits are cut back to the real vocabulary before anything sees them, so a padding
id is never predicted, takes no part in a softmax or loss, and its rows get no gradient
(the data never holds one either: its tokens are checked against the vocabulary). The
padding is invisible outside the module: its output, and the shapes ddpimg records and
exports, have ``vocab_size``.

There is no dropout (nanoGPT's pre-training setting): nothing random happens in a forward
pass, so the loss cannot depend on how the global batch is split over ranks.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from ddpimg.train.tasks.gpt.config import GptConfig

INIT_STD = 0.02


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GptConfig) -> None:
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError(f"n_embd {config.n_embd} is not divisible by n_head {config.n_head}")
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = (
            part.view(batch, tokens, self.n_head, width // self.n_head).transpose(1, 2)
            for part in self.c_attn(x).split(width, dim=2)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.c_proj(y.transpose(1, 2).reshape(batch, tokens, width))
        return out


class Mlp(nn.Module):
    def __init__(self, config: GptConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))
        return out


class Block(nn.Module):
    """One transformer layer; FSDP shards the model block by block."""

    def __init__(self, config: GptConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = Mlp(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        out: torch.Tensor = x + self.mlp(self.ln_2(x))
        return out


class Gpt(nn.Module):
    """Token ids (batch, tokens) -> next-token logits (batch, tokens, ``vocab_size``)."""

    def __init__(self, config: GptConfig) -> None:
        super().__init__()
        self.config = config
        rows = config.padded_vocab_size
        self.wte = nn.Embedding(rows, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, rows, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(_init_weights)
        residual_std = INIT_STD / math.sqrt(2 * config.n_layer)
        for name, parameter in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(parameter, mean=0.0, std=residual_std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        tokens = idx.shape[1]
        if tokens > self.config.block_size:
            raise ValueError(f"{tokens} tokens exceed the context of {self.config.block_size}")
        positions = torch.arange(tokens, device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        logits: torch.Tensor = self.lm_head(self.ln_f(x))
        # The padding's logits are sliced off rather than masked to -inf: a slice by a
        # constant is a view (no pass over the logits, no mask buffer to keep on the device
        # and out of checkpoints), the loss, accuracy and any sampling see only real tokens
        # by the shape alone, and torch.compile traces it as a plain static slice. Its cost
        # is in the backward pass, which writes the logits' gradient into a zero-padded
        # tensor of the matmul's width.
        return logits[..., : self.config.vocab_size]

    def num_parameters(self) -> int:
        """Distinct parameters (the tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward and backward) at ``seq_len`` tokens a sample:
        6 N for the weights' matmuls (N: parameters without the position embedding, which
        is a lookup) plus 12 L H Q T for attention's scores and weighted sums (PaLM,
        appendix B; nanoGPT's ``estimate_mfu``)."""
        c = self.config
        weights = self.num_parameters() - self.wpe.weight.numel()
        attention = 12 * c.n_layer * c.n_head * (c.n_embd // c.n_head) * seq_len
        return float(6 * weights + attention)


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
