"""``ddpimg data``: prepare datasets before training.

- ``ddpimg data pack SRC DST``: an ImageFolder tree as tar shards in the WebDataset layout,
  with their index (``ddpimg.data.pack``).
- ``ddpimg data index DIR``: list an ImageFolder tree (or scan tar shards) into the index
  ``train`` reads, now rather than at the start of a job; ``--out RUN_DIR`` says where it
  goes when DIR is read-only (as ``train --out`` does).
- ``ddpimg data tokenize SRC... DST``: text or JSONL files into llm.c token shards for
  ``train gpt`` (``ddpimg.data.tokenize``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ddpimg import exitcodes
from ddpimg.data.pack import DEFAULT_QUALITY, DEFAULT_SHARD_MB, PackOptions, describe, pack


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    packing = actions.add_parser(
        "pack",
        help="pack an ImageFolder tree into tar shards (WebDataset layout) with their index",
        description="Pack SRC (SRC/train/CLASS/*, SRC/val/CLASS/*) into DST/train-NNNNNN.tar "
        "and DST/val-NNNNNN.tar. Resumable: run the same command again after an interruption.",
        allow_abbrev=False,
    )
    packing.add_argument("source", type=Path, metavar="SRC")
    packing.add_argument("target", type=Path, metavar="DST")
    size = packing.add_mutually_exclusive_group()
    size.add_argument(
        "--shard-mb",
        type=float,
        default=DEFAULT_SHARD_MB,
        metavar="MB",
        help=f"about this many MB a shard (default {DEFAULT_SHARD_MB:.0f})",
    )
    size.add_argument("--shard-samples", type=_positive, metavar="N", help="N samples a shard")
    packing.add_argument(
        "--max-side",
        type=_positive,
        metavar="PX",
        help="re-encode images whose longer side exceeds PX as JPEG of that side (FFCV uses "
        "500 for ImageNet); default: store every file as it is",
    )
    packing.add_argument(
        "--quality",
        type=_positive,
        default=DEFAULT_QUALITY,
        metavar="Q",
        help=f"JPEG quality of re-encoded images (default {DEFAULT_QUALITY})",
    )
    packing.add_argument(
        "--workers",
        type=_positive,
        default=len(os.sched_getaffinity(0)),
        metavar="N",
        help="processes writing shards (default: this process's CPUs)",
    )
    indexing = actions.add_parser(
        "index",
        help="list a dataset directory (or scan its shards) into the index train reads",
        allow_abbrev=False,
    )
    indexing.add_argument("root", type=Path, metavar="DIR")
    indexing.add_argument(
        "--out",
        type=Path,
        default=Path("ddpimg-run"),
        metavar="RUN_DIR",
        help="where the index goes if DIR is read-only: the run directory (--out) of the runs "
        "that read it (default ddpimg-run)",
    )
    add_tokenize_arguments(actions)


def add_tokenize_arguments(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ddpimg.data.tokenize import DEFAULT_SHARD_TOKENS, DEFAULT_VAL_EVERY
    from ddpimg.data.tokenizers import TOKENIZERS

    tokenizing = actions.add_parser(
        "tokenize",
        help="tokenize text or JSONL files into llm.c token shards for train gpt",
        description="Tokenize SRC (.txt files: a document each; .jsonl files: a document a "
        "line; directories: searched for both) into llm.c shards DST/NAME_train_NNNNNN.bin and "
        "DST/NAME_val_NNNNNN.bin, each document preceded by the end-of-text token. Offline: "
        "GPT-2's encoding files come from --encoding-dir or tiktoken's cache, never the network.",
        allow_abbrev=False,
    )
    tokenizing.add_argument("sources", type=Path, nargs="+", metavar="SRC")
    tokenizing.add_argument("target", type=Path, metavar="DST")
    tokenizing.add_argument(
        "--tokenizer",
        choices=TOKENIZERS,
        default=TOKENIZERS[0],
        help="gpt2: GPT-2's BPE through tiktoken (vocabulary 50257); bytes: UTF-8 bytes "
        "(vocabulary 257) (default: %(default)s)",
    )
    tokenizing.add_argument(
        "--encoding-dir",
        type=Path,
        metavar="DIR",
        help="GPT-2's encoding files: vocab.bpe + encoder.json, a Hugging Face gpt2 "
        "directory's merges.txt + vocab.json, or gpt2.tiktoken (default: tiktoken's cache, "
        "TIKTOKEN_CACHE_DIR)",
    )
    tokenizing.add_argument(
        "--text-field",
        default="text",
        metavar="KEY",
        help="the field of a JSONL line holding the document (default: %(default)s)",
    )
    tokenizing.add_argument(
        "--shard-tokens",
        type=_positive,
        default=DEFAULT_SHARD_TOKENS,
        metavar="N",
        help="tokens a shard (default: %(default)s, llm.c's)",
    )
    tokenizing.add_argument(
        "--val-every",
        type=_positive,
        default=DEFAULT_VAL_EVERY,
        metavar="N",
        help="documents 0, N, 2N, ... form the validation split (default: %(default)s)",
    )
    tokenizing.add_argument(
        "--name", default="corpus", help="the shards' name prefix (default: %(default)s)"
    )
    tokenizing.add_argument(
        "--workers",
        type=_positive,
        default=len(os.sched_getaffinity(0)),
        metavar="N",
        help="encoding processes (default: this process's CPUs)",
    )


def run(args: argparse.Namespace, argv: list[str]) -> int:
    if args.action == "tokenize":
        from ddpimg.data import tokenize

        options = tokenize.TokenizeOptions(
            tokenizer=args.tokenizer,
            encoding_dir=args.encoding_dir,
            text_field=args.text_field,
            shard_tokens=args.shard_tokens,
            val_every=args.val_every,
            workers=args.workers,
            name=args.name,
        )
        result = tokenize.tokenize(args.sources, args.target, options, sys.stderr)
        print(tokenize.describe(result, args.target))
        return exitcodes.OK
    if args.action == "pack":
        packing = PackOptions(
            shard_samples=args.shard_samples,
            shard_mb=args.shard_mb,
            max_side=args.max_side,
            quality=args.quality,
            workers=args.workers,
        )
        packed = pack(args.source, args.target, packing, sys.stderr)
        print(describe(packed, args.target))
        return exitcodes.OK
    from ddpimg.data.sources import open_splits, prepare

    for directory in prepare(args.root, args.out, sys.stderr):
        print(f"index: {directory}")
    train, val = open_splits(args.root, args.out)
    print(f"{args.root}: {len(train):,} training and {len(val):,} evaluation samples, "
          f"{len(train.classes)} classes ({train.kind})")  # fmt: skip
    return exitcodes.OK
