"""The ``gpt`` trainer's model shapes and sizes (``--size``), without torch: the command
line, the model (``model``) and the task (``task``) all read them from here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

# The largest value of each dimension a shape read from a file may have (GPT-3's largest
# model: 96 layers and heads, 12,288 wide, a context of 2,048), checked before a model is
# built from it: a config.json saying a vocabulary of 10^12 would ask for terabytes.
# The vocabulary's bound is the data's (``ddpimg.data.tokenshards.MAX_VOCABULARY``).
MAX_DIMENSIONS = {
    "n_layer": 1024,
    "n_head": 1024,
    "n_embd": 1 << 16,
    "block_size": 1 << 20,
    "vocab_size": 1 << 20,
}
# The model's token embedding and output layer have the vocabulary padded to a multiple of
# this many rows: nanoGPT's 50304 for GPT-2's 50257 makes the output layer's matrix
# multiplications faster. The padding is the model's alone (``model.Gpt``): everything
# else, the shapes in manifest.json and config.json included, has the real vocabulary.
VOCAB_MULTIPLE = 64


class ShapeError(ValueError):
    """Why values do not describe a model ddpimg builds, naming the key."""


@dataclass(frozen=True)
class GptConfig:
    """Shape of a model: ``block_size`` is the context length in tokens, ``vocab_size`` the
    tokens it reads and predicts (the data's vocabulary, unpadded)."""

    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int

    @classmethod
    def from_values(
        cls, values: Mapping[str, object], names: Mapping[str, str] | None = None
    ) -> GptConfig:
        """The shape ``values`` describe, each dimension a whole number from 1 to its
        ``MAX_DIMENSIONS`` bound and ``n_embd`` divisible by ``n_head``; ShapeError naming the
        key otherwise. ``names``: a key's name in ``values`` where it differs (Hugging Face
        calls ``block_size`` ``n_positions``)."""
        found: dict[str, int] = {}
        for item in fields(cls):
            key = (names or {}).get(item.name, item.name)
            if key not in values:
                raise ShapeError(f"no {key} key")
            value = values[key]
            bound = MAX_DIMENSIONS[item.name]
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= bound:
                raise ShapeError(f"{key} is {value!r}, expected a whole number from 1 to {bound:,}")
            found[item.name] = value
        shape = cls(**found)
        if shape.n_embd % shape.n_head:
            raise ShapeError(f"n_embd {shape.n_embd} is not divisible by n_head {shape.n_head}")
        return shape

    @property
    def padded_vocab_size(self) -> int:
        """The rows of ``model.Gpt``'s token embedding and output layer: ``vocab_size``
        rounded up to a multiple of ``VOCAB_MULTIPLE``."""
        return -(-self.vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE

    @property
    def parameters(self) -> int:
        """The parameters of ``model.Gpt`` of this shape (the output layer tied to the
        token embedding, the padded rows counted), without building it."""
        width = self.n_embd
        per_layer = 12 * width * width + 13 * width
        rows = self.padded_vocab_size + self.block_size
        return rows * width + self.n_layer * per_layer + 2 * width


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
    # GPT-2 small: GPT-2's vocabulary (the model pads it to 50304).
    "124m": GptSize(
        GptConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257),
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
