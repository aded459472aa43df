"""``train gpt``: a GPT-2-style language model (``model``) trained on next-token prediction
with AdamW (``task``) on token sequences (``data``: synthetic, or llm.c / nanoGPT shards),
from scratch or from Hugging Face GPT-2 weights (``hf``). Its sizes (``--size``) live in
``config``, once: the model's shape and the hyper-parameters that go with it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError
from ddpimg.train.config import check_at_least
from ddpimg.train.tasks.gpt.config import DEFAULT_SIZE, SIZES
from ddpimg.train.tasks.spec import TrainerFlag, TrainerSpec, learning_rate_text

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Task


def _task(config: TrainConfig, ctx: DistContext, batch: BatchLayout) -> Task:
    from ddpimg.train.tasks.gpt.task import GptTask

    return GptTask(config, ctx)


def _check(config: TrainConfig) -> None:
    if config.size is not None and config.size not in SIZES:
        choices = ", ".join(SIZES)
        raise DdpimgError(
            f"--size must be one of {choices}, got {config.size!r}", hint=f"pick one of {choices}"
        )
    check_at_least("--seq-len", config.seq_len, 1, "leave it out to use the model's whole context")
    if config.init_from is not None and config.size is not None:
        raise DdpimgError(
            f"--size {config.size} and --init-from {config.init_from}: the model's shape comes "
            "from the checkpoint's config.json",
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
        TrainerFlag(
            "--eval-data",
            "the evaluation shards (a directory, glob or file) instead of --data's "
            "validation-named ones",
            default="--data's files with 'val' as a word of their name",
            metavar="PATH",
        ),
        TrainerFlag(
            "--init-from",
            "start from the GPT-2 weights of a Hugging Face model directory (config.json and "
            "model.safetensors or pytorch_model.bin), e.g. to fine-tune; its config gives the "
            "shape and vocabulary",
            default="fresh weights of --size",
            metavar="DIR",
        ),
    ),
    check=_check,
)
