"""The largest batch of a ddpimg trainer that fits on the GPU, in a process of its own.

    python benchmarks/batch_probe.py gpt --size 124m --start 8 --limit 512
    python benchmarks/batch_probe.py resnet --arch resnet50 --image-size 224 --start 64 \\
        --limit 2048

Builds the trainer's model, optimizer, loss and synthetic data as ``train`` does (its
task, bf16 autocast, channels_last images on a GPU), then runs the search of
benchmarks/parts/batchsearch.py with one training step as the trial: the step's peak of
``torch.cuda.max_memory_allocated`` over the device's memory, or torch's out-of-memory
error. Between trials the gradients, Python's garbage and the allocator's cache are
released, so each trial starts from the model and optimizer state alone. Prints one line,
``RESULT {json}`` (``BatchChoice.record()``); exits 1 with the reason when even the first
size does not fit.

A process of its own because the CUDA context and the allocator's cache it leaves would
take memory from the benchmark's run that follows. ``--device cpu`` runs the same steps on
the CPU with no memory to measure (every size fits): a check of the plumbing, for tests.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Callable, Sequence

import torch
from parts.batchsearch import BatchChoice, NoBatchFits, SearchLimits, find_largest_batch

from ddpimg.runtime.context import DistContext
from ddpimg.runtime.device import rank_cpu_share
from ddpimg.train.batch import BatchLayout
from ddpimg.train.config import TrainConfig
from ddpimg.train.dropout import BatchPosition, DropoutContext
from ddpimg.train.options import TrainerOptions
from ddpimg.train.sharding import BatchPlan
from ddpimg.train.tasks import TRAINERS
from ddpimg.train.tasks.gpt import GptOptions
from ddpimg.train.tasks.resnet import ResnetOptions


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("trainer", choices=["gpt", "resnet"])
    parser.add_argument("--size", default="124m", help="gpt: the model size")
    parser.add_argument("--arch", default="resnet50", help="resnet: the architecture")
    parser.add_argument("--image-size", type=int, default=224, help="resnet: pixels a side")
    parser.add_argument("--start", type=int, required=True, help="the first size tried")
    parser.add_argument("--limit", type=int, required=True, help="the largest size tried")
    parser.add_argument("--multiple", type=int, default=8, help="every size a multiple of it")
    parser.add_argument("--max-trials", type=int, default=12)
    parser.add_argument("--headroom", type=float, default=0.9, help="the peak's largest share")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    return parser.parse_args(argv)


def trainer_options(ns: argparse.Namespace) -> TrainerOptions:
    if ns.trainer == "gpt":
        return GptOptions(size=ns.size)
    return ResnetOptions(arch=ns.arch, image_size=ns.image_size)


def release(device: torch.device) -> None:
    """Free what a trial (or its out-of-memory error's frames) held, and restart the peak."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_reader(device: torch.device) -> Callable[[], float]:
    if device.type != "cuda":
        return lambda: 0.0  # no device memory to fill: every size fits (the plumbing check)
    total = torch.cuda.get_device_properties(device).total_memory
    return lambda: torch.cuda.max_memory_allocated(device) / total


def step_trial(ns: argparse.Namespace, device: torch.device) -> Callable[[int], float]:
    """One training step of the trainer at a batch size, as ``train``'s loop runs it; the
    peak memory fraction it reached."""
    config = TrainConfig(
        trainer=ns.trainer,
        options=trainer_options(ns),
        batch_size=ns.start,
        train_samples=ns.limit,
        eval_samples=ns.start,
        precision="bf16",
    )
    ctx = DistContext(
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        num_nodes=1,
        device=device,
        backend="nccl" if device.type == "cuda" else "gloo",
        timeout_s=600.0,
        cpu_share=rank_cpu_share(1, rank_is_task=False),
        cpu_threads_from_share=False,
    )
    task = TRAINERS[ns.trainer].factory(config, ctx, BatchLayout.of(config, 1))
    train_set, _ = task.datasets()
    dropout = DropoutContext(config.seed)
    torch.manual_seed(config.seed)
    model = task.build_model(dropout)
    optimizer = task.make_optimizer(model)
    model.train()
    peak = peak_reader(device)

    def trial(batch: int) -> float:
        optimizer.zero_grad(set_to_none=True)
        release(device)
        plan = BatchPlan(1, torch.arange(batch), (slice(0, batch),))
        batches = train_set.batches(plan)
        inputs, targets = next(batches)
        batches.close()
        dropout.position = BatchPosition(1, 0, batch)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            output = model(inputs)
        torch.autograd.backward(task.loss(output, targets).mean())
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return peak()

    return trial


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse_args(argv)
    limits = SearchLimits(ns.start, ns.limit, ns.multiple, ns.max_trials, ns.headroom)
    device = torch.device("cuda", 0) if ns.device == "cuda" else torch.device("cpu")
    try:
        searched = find_largest_batch(step_trial(ns, device), limits)
    except NoBatchFits as err:
        print(f"batch_probe: {ns.trainer}: {err}", file=sys.stderr)
        return 1
    choice = BatchChoice(searched.batch, "searched", searched)
    print("RESULT " + json.dumps(choice.record()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
