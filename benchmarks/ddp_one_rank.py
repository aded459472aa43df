"""Torch's DistributedDataParallel on a world of one against the bare module, in one process.

    python benchmarks/ddp_one_rank.py MODEL [--blocks 5] [--steps 20]

MODEL: mnist, gpt-tiny or resnet18-64px (ddpimg's trainers' models, data and optimisers).
Two copies of the model, built from the same seed: one bare, one wrapped in DDP as the
tutorials wrap it. Blocks of ``--steps`` training steps alternate between the two (the first
block of each is a warm-up and not counted), so both see the same machine load; prints one
JSON line with the steps/s of every block. This is what ``--strategy ddp`` saves by training
the bare module when there is one rank.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ddpimg.runtime.context import DistContext
from ddpimg.runtime.device import rank_cpu_share
from ddpimg.train.batch import BatchLayout
from ddpimg.train.config import TrainConfig
from ddpimg.train.dropout import BatchPosition, DropoutContext
from ddpimg.train.sharding import BatchPlan
from ddpimg.train.tasks import TRAINERS
from ddpimg.train.tasks.gpt import GptOptions
from ddpimg.train.tasks.resnet import ResnetOptions

# name -> DDP's keyword arguments (None: the bare module). "ddp": as the tutorials wrap it;
# "ddp-bucket-view": as ddpimg wraps it with several ranks (gradients live in DDP's buckets).
VARIANTS: dict[str, dict[str, Any] | None] = {
    "bare": None,
    "ddp": {},
    "ddp-bucket-view": {"gradient_as_bucket_view": True},
}
MODELS: dict[str, dict[str, Any]] = {
    "mnist": {"trainer": "mnist", "batch_size": 64},
    "gpt-tiny": {"trainer": "gpt", "options": GptOptions(size="tiny"), "batch_size": 32},
    "resnet18-64px": {
        "trainer": "resnet",
        "options": ResnetOptions(arch="resnet18", image_size=64),
        "batch_size": 16,
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="a subset of " + ", ".join(VARIANTS)
    )
    args = parser.parse_args()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    spec = MODELS[args.model]
    batch = spec["batch_size"]
    config = TrainConfig(**spec, train_samples=batch * args.steps, eval_samples=batch)
    ctx = DistContext(
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        num_nodes=1,
        device=torch.device("cpu"),
        backend="gloo",
        timeout_s=600.0,
        cpu_share=rank_cpu_share(1, rank_is_task=False),
        cpu_threads_from_share=False,
    )
    task = TRAINERS[config.trainer].factory(config, ctx, BatchLayout.of(config, 1))
    train_set, _ = task.datasets()
    steps = tuple(slice(step * batch, (step + 1) * batch) for step in range(args.steps))
    plan = BatchPlan(None, torch.arange(len(train_set)), steps)
    dropout = DropoutContext(config.seed)
    variants: dict[str, tuple[nn.Module, torch.optim.Optimizer]] = {}
    for name in args.variants.split(","):
        torch.manual_seed(config.seed)
        model = task.build_model(dropout)
        optimizer = task.make_optimizer(model)
        ddp_options = VARIANTS[name]
        wrapped = model if ddp_options is None else DistributedDataParallel(model, **ddp_options)
        variants[name] = (wrapped, optimizer)
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for block in range(args.blocks + 1):
        # Rotate the order, so that no variant always runs right after the same other one.
        shift = block % len(variants)
        order = [*list(variants)[shift:], *list(variants)[:shift]]
        for name in order:
            model, optimizer = variants[name]
            model.train()
            began = time.perf_counter()
            for step, (inputs, targets) in enumerate(train_set.batches(plan)):
                dropout.position = BatchPosition(step + 1, 0, batch)
                loss = task.loss(model(inputs), targets).mean()
                torch.autograd.backward(loss)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            if block > 0:
                rates[name].append(args.steps / (time.perf_counter() - began))
    dist.destroy_process_group()
    print(json.dumps({"model": args.model, "steps_per_s": rates}))


if __name__ == "__main__":
    main()
