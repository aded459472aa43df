"""The ``gpt`` trainer's model shapes and sizes (``--size``), without torch: the command
line, the model (``model``) and the task (``task``) all read them from here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GptConfig:
    """Shape of a model: ``block_size`` is the context length in tokens."""

    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int


@dataclass(frozen=True)
class GptSize:
    """One ``--size``: the model's shape, its AdamW learning rate and evaluation batch, and
    how ``train --help`` describes it (``name`` before the shape, ``use`` after it)."""

    shape: GptConfig
    learning_rate: float
    eval_batch_size: int
    name: str = ""
    use: str = ""

    def describe(self) -> str:
        shape = self.shape
        text = f"{shape.n_layer} layers, {shape.n_embd} wide, context {shape.block_size}"
        text = f"{self.name} ({text})" if self.name else text
        return f"{text}, {self.use}" if self.use else text


SIZES = {
    # GPT-2 small; the vocabulary 50257 padded to a multiple of 64 for faster matmuls.
    "124m": GptSize(
        GptConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304),
        learning_rate=6e-4,
        eval_batch_size=8,
        name="GPT-2 small",
    ),
    "tiny": GptSize(
        GptConfig(n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=256),
        learning_rate=1e-3,
        eval_batch_size=64,
        use="for CPU runs",
    ),
}
DEFAULT_SIZE = "124m"
