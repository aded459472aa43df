"""``ddpimg export RUN_DIR DST [--checkpoint PATH]``: a ``train gpt`` run's checkpoint (DDP,
DeepSpeed ZeRO 0-3 or FSDP) as a Hugging Face GPT-2 directory (``config.json`` and
``model.safetensors``) that ``GPT2LMHeadModel.from_pretrained(DST)`` loads
(``ddpimg.train.tasks.gpt.export``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ddpimg import exitcodes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run",
        type=Path,
        metavar="RUN_DIR",
        help="the run's directory, or its name in ./runs (or $DDPIMG_RUNS), or latest",
    )
    parser.add_argument("target", type=Path, metavar="DST", help="the directory to write (new)")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        metavar="PATH",
        help="the checkpoint directory to export (default: the newest valid one of RUN_DIR)",
    )


def run(args: argparse.Namespace, argv: list[str]) -> int:
    from ddpimg.runs.latest import resolve_run
    from ddpimg.train.tasks.gpt.export import export

    chosen = export(resolve_run(str(args.run)), args.target, args.checkpoint)
    print(f"{args.target}: Hugging Face GPT-2 model from {chosen}")
    print(f"load it:  GPT2LMHeadModel.from_pretrained({str(args.target)!r})")
    return exitcodes.OK
