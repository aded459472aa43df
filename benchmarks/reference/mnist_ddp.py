"""MNIST the way the origin tutorials train it (pytorch/examples mnist/main.py made DDP):
a map-style Dataset with a per-sample transform, a DataLoader with worker processes,
``loss.item()`` every step, and the whole test set evaluated on every rank.

Same CNN (ddpimg's MnistNet, imported), data (the synthetic set), per-rank batch,
precision (fp32), optimiser (Adadelta lr 1.0) and initial weights (torch.manual_seed(seed))
as ``train mnist``. Its dropout layers are ddpimg's GlobalBatchDropout, which must be told
the step and the rank's rows: the one line a plain script would not have.

    python benchmarks/reference/mnist_ddp.py --max-steps 30 --warmup-steps 5
    python benchmarks/reference/mnist_ddp.py --epochs 5 --max-steps 0 --device cuda \\
        --train-samples 60000 --eval-samples 10000   # the tutorial's 5 epochs on a GPU
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
import torch.nn.functional as F
from common import SameOrderSampler, device_ids, report, seed_everything, setup
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

from ddpimg.train.dropout import BatchPosition, DropoutContext
from ddpimg.train.tasks.mnist.data import normalize, synthetic_images
from ddpimg.train.tasks.mnist.task import MnistNet


class MnistDataset(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, split: str, count: int) -> None:
        data = synthetic_images(split, count)
        self.images, self.labels = data.images, data.labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        # ToTensor + Normalize, one sample at a time.
        return normalize(self.images[index : index + 1])[0], int(self.labels[index])


def evaluate(
    model: torch.nn.Module, loader: DataLoader[Any], device: torch.device
) -> tuple[float, float]:
    """The whole test set, on every rank, as the tutorial does; the mean loss and accuracy."""
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for cpu_data, cpu_target in loader:
            data, target = cpu_data.to(device), cpu_target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            correct += int(output.argmax(dim=1).eq(target).sum().item())
    model.train()
    count = len(loader.dataset)  # type: ignore[arg-type]
    return test_loss / count, correct / count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=30, help="0: the whole epochs")
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--train-samples", type=int, default=6400)
    parser.add_argument("--eval-samples", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    rank, world_size, device = setup(args.device)
    train_set = MnistDataset("train", args.train_samples)
    test_set = MnistDataset("test", args.eval_samples)
    sampler = SameOrderSampler(len(train_set), args.batch_size, rank, world_size, args.seed)
    pin = device.type == "cuda"
    train_loader = DataLoader(
        train_set,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        pin_memory=pin,
    )
    test_loader = DataLoader(test_set, batch_size=1000, num_workers=args.workers, pin_memory=pin)
    seed_everything(args.seed)
    dropout = DropoutContext(args.seed)
    model = DDP(MnistNet(dropout).to(device), device_ids=device_ids(device))
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    model.train()
    step, losses, began = 0, [], time.perf_counter()
    steady_from, eval_s, test_loss, accuracy = began, 0.0, float("nan"), float("nan")
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        for cpu_data, cpu_target in train_loader:
            data, target = cpu_data.to(device), cpu_target.to(device)
            step += 1
            dropout.position = BatchPosition(
                step, rank * args.batch_size, args.batch_size * world_size
            )
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if step % 10 == 0 and rank == 0:
                print(f"Train epoch {epoch} step {step}\tLoss: {losses[-1]:.6f}", flush=True)
            if step == args.warmup_steps:
                steady_from = time.perf_counter()
            if step == args.max_steps:
                break
        eval_began = time.perf_counter()
        test_loss, accuracy = evaluate(model, test_loader, device)
        eval_s += time.perf_counter() - eval_began
        if step == args.max_steps:
            break
    # Training time after warm-up, the evaluations left out (as ddpimg counts it).
    steady_s = time.perf_counter() - steady_from - eval_s
    if rank == 0:
        report(
            {
                "steps_per_s": (step - args.warmup_steps) / steady_s,
                "loss_at_k": losses[-1],
                "eval_loss": test_loss,
                "eval_accuracy": accuracy,
                "eval_s": eval_s,
                "steps": step,
                "wall_s": time.perf_counter() - began,
            }
        )


if __name__ == "__main__":
    main()
