"""``train gpt``: a GPT-2-style language model (``model``) trained on next-token prediction
with AdamW (``task``) on token sequences (``data``: synthetic, or llm.c / nanoGPT shards),
from scratch or from Hugging Face GPT-2 weights (``hf``). Its sizes (``--size``) live in
``config``, once: the model's shape and the hyper-parameters that go with it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpimg.train.tasks.gpt.config import DEFAULT_SIZE, SIZES
from ddpimg.train.tasks.gpt.options import GptOptions
from ddpimg.train.tasks.spec import TrainerSpec, learning_rate_text

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Task

# The options live in ``options``, which the task imports too (the task never imports this
# package, whose factory imports the task); they are exported here as well.
__all__ = ["SIZES", "SPEC", "GptOptions"]


def _task(config: TrainConfig, ctx: DistContext, batch: BatchLayout) -> Task:
    from ddpimg.train.tasks.gpt.task import GptTask

    return GptTask(config, ctx)


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
