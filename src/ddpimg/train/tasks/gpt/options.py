"""``train gpt``'s own options, which its spec (the package) and its task share; imports no
torch, and neither the package nor the task."""

from __future__ import annotations

from dataclasses import dataclass

from ddpimg.errors import DdpimgError
from ddpimg.train.options import TrainerOptions, option
from ddpimg.train.tasks.gpt.config import DEFAULT_SIZE, SIZES


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
