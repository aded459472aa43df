"""A tutorial script written for torch.distributed.launch without --use-env: it takes the
local rank as an argument, checks it against the environment, and does one all-reduce."""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local-rank", "--local_rank", type=int, required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()
if args.local_rank != int(os.environ["LOCAL_RANK"]):
    sys.exit(f"--local-rank {args.local_rank} but LOCAL_RANK={os.environ['LOCAL_RANK']}")
dist.init_process_group("gloo")  # env://
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
with open(os.path.join(args.out, f"rank{dist.get_rank()}.json"), "w") as file:
    json.dump({"local_rank": args.local_rank, "sum": total.item()}, file)
dist.destroy_process_group()
