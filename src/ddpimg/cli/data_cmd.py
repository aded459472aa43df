"""``ddpimg data``: prepare datasets before training.

- ``ddpimg data pack SRC DST``: an ImageFolder tree as tar shards in the WebDataset layout,
  with their index (``ddpimg.data.pack``).
- ``ddpimg data index DIR``: list an ImageFolder tree (or scan tar shards) into the index
  ``train`` reads, now rather than at the start of a job; ``--out RUN_DIR`` says where it
  goes when DIR is read-only (as ``train --out`` does).
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
        help="where the index goes if DIR is read-only: the --out of the runs (default "
        "ddpimg-run, train's default)",
    )


def run(args: argparse.Namespace, argv: list[str]) -> int:
    if args.action == "pack":
        options = PackOptions(
            shard_samples=args.shard_samples,
            shard_mb=args.shard_mb,
            max_side=args.max_side,
            quality=args.quality,
            workers=args.workers,
        )
        result = pack(args.source, args.target, options, sys.stderr)
        print(describe(result, args.target))
        return exitcodes.OK
    from ddpimg.data.sources import open_splits, prepare

    for directory in prepare(args.root, args.out, sys.stderr):
        print(f"index: {directory}")
    train, val = open_splits(args.root, args.out)
    print(f"{args.root}: {len(train):,} training and {len(val):,} evaluation samples, "
          f"{len(train.classes)} classes ({train.kind})")  # fmt: skip
    return exitcodes.OK
