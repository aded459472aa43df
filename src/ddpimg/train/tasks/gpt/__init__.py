"""``train gpt``: a GPT-2-style language model (``model``) trained on next-token prediction
with AdamW (``task``) on token sequences (``data``: synthetic, or llm.c / nanoGPT shards),
from scratch or from Hugging Face GPT-2 weights (``hf``). Its sizes (``--size``) live in
``config``, once: the model's shape and the hyper-parameters that go with it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError
from ddpimg.train.options import TrainerOptions, option
from ddpimg.train.tasks.gpt.config import DEFAULT_SIZE, SIZES
from ddpimg.train.tasks.spec import TrainerSpec, learning_rate_text

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Task


def _task(config: TrainConfig, ctx: DistContext, batch: BatchLayout) -> Task:
    from ddpimg.train.tasks.gpt.task import GptTask

    return GptTask(config, ctx)


@dataclass(frozen=True)
class GptOptions(TrainerOptions):
    """``train gpt``'s own flags."""

    size: str | None = option(
        "; ".join(f"{name}: {size.describe()}" for name, size in SIZES.items()),
        default=DEFAULT_SIZE,
        choices=tuple(SIZES),
    )
    seq_len: int | None = option(
        "tokens per sample, at most the model's context",
        default="the context",
        metavar="N",
        minimum=1,
        hint="leave it out to use the model's whole context",
    )
    eval_data: str | None = option(
        "the evaluation shards (a directory, glob or file) instead of --data's "
        "validation-named ones",
        default="--data's files with 'val' as a word of their name",
        metavar="PATH",
        free_to_change=True,
    )
    init_from: str | None = option(
        "start from the GPT-2 weights of a Hugging Face model directory (config.json and "
        "model.safetensors or pytorch_model.bin), e.g. to fine-tune; its config gives the "
        "shape and vocabulary",
        default="fresh weights of --size",
        metavar="DIR",
        # A resumed run loads the checkpoint's weights.
        free_to_change=True,
    )

    def check(self) -> None:
        if self.init_from is not None and self.size is not None:
            raise DdpimgError(
                f"--size {self.size} and --init-from {self.init_from}: the model's shape "
                "comes from the checkpoint's config.json",
                hint="drop --size",
            )


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
    data_source="a directory or glob of token shards: llm.c's (*_train_*.bin, "
    "*_val_*.bin; uint16 or uint32) or nanoGPT's (train.bin, val.bin); files with 'val' as a "
    "word of their name are the evaluation set",
    options=GptOptions,
)
