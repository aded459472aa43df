"""A plain PyTorch DDP training loop, as a researcher writes one, with the three lines of
ddpimg's API that give it the preemption contract (marked ``# ddpimg``) and its own
checkpoint and resume (a file in the run directory; the loop starts after its step).

    train --script plain_ddp.py OUT STEPS [--step-sleep S] [--marker-step N]

Every step's batch comes from a generator seeded by the step, so a resumed run sees the
same data as one never stopped. Each rank writes ``OUT/rank<N>.json``: the loss of every
step, averaged over the ranks (the global batch's), and a checksum of its weights.
``--marker-step N``: rank 0 creates ``OUT/step-K`` after step K, for every K >= N.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import ddpimg  # ddpimg

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("steps", type=int)
parser.add_argument("--step-sleep", type=float, default=0.0)
parser.add_argument("--marker-step", type=int, default=0)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
checkpoint = os.path.join(args.out, "checkpoint.pt")
losses: dict[int, float] = {}
start = 0
if os.path.exists(checkpoint):
    state = torch.load(checkpoint, weights_only=True)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    start = state["step"]
    losses = {int(step): loss for step, loss in state["losses"].items()}

for step in range(start + 1, args.steps + 1):
    generator = torch.Generator().manual_seed(step)
    inputs = torch.randn(world * 8, 16, generator=generator)
    targets = inputs.sum(dim=1, keepdim=True).sin()
    mine = slice(rank * 8, (rank + 1) * 8)
    loss = torch.nn.functional.mse_loss(model(inputs[mine]), targets[mine])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    losses[step] = float(mean) / world
    ddpimg.log(step, loss=losses[step])
    if args.marker_step and step >= args.marker_step and rank == 0:
        open(os.path.join(args.out, f"step-{step}"), "w").close()
    time.sleep(args.step_sleep)
    if ddpimg.preemption_requested():  # ddpimg
        if rank == 0:
            state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save(state | {"step": step, "losses": losses}, checkpoint + ".tmp")
            os.replace(checkpoint + ".tmp", checkpoint)
        dist.barrier()
        sys.exit(ddpimg.PREEMPTED)  # ddpimg

checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
with open(os.path.join(args.out, f"rank{rank}.json"), "w", encoding="utf-8") as stream:
    json.dump({"rank": rank, "world_size": world, "losses": losses, "checksum": checksum}, stream)
dist.destroy_process_group()
