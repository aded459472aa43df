"""``train gpt``: a GPT-2-style language model (``ddpimg.train.models.gpt``) trained on
next-token prediction with AdamW (``task``). Its sizes (``--size``) live here, once: the
model's shape and the hyper-parameters that go with it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError
from ddpimg.train.config import check_at_least
from ddpimg.train.tasks.spec import TrainerFlag, TrainerSpec, learning_rate_text

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Task


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


def _task(config: TrainConfig, ctx: DistContext) -> Task:
    from ddpimg.train.tasks.gpt.task import GptTask

    return GptTask(config, ctx)


def _check(config: TrainConfig) -> None:
    if config.size is not None and config.size not in SIZES:
        choices = ", ".join(SIZES)
        raise DdpimgError(
            f"--size must be one of {choices}, got {config.size!r}", hint=f"pick one of {choices}"
        )
    check_at_least("--seq-len", config.seq_len, 1, "leave it out to use the model's whole context")


SPEC = TrainerSpec(
    name="gpt",
    factory=_task,
    optimizer="AdamW",
    learning_rate=SIZES[DEFAULT_SIZE].learning_rate,
    learning_rate_note="; ".join(
        f"{learning_rate_text(size.learning_rate)} for --size {name}"
        for name, size in SIZES.items()
        if size.learning_rate != SIZES[DEFAULT_SIZE].learning_rate
    ),
    # Per-rank batch that fits a 40 GB GPU with the 124m model at its full context.
    default_batch_size=8,
    bf16_on_gpu=True,
    data_source="a UTF-8 text file read as bytes",
    flags=(
        TrainerFlag(
            "--size",
            "; ".join(f"{name}: {size.describe()}" for name, size in SIZES.items()),
            default=DEFAULT_SIZE,
            choices=tuple(SIZES),
        ),
        TrainerFlag(
            "--seq-len",
            "tokens per sample, at most the model's context",
            default="the context",
            metavar="N",
            type=int,
        ),
    ),
    check=_check,
)
