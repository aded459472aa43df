"""ResNet trained the way the origin tutorials' DDP image scripts do it: a map-style Dataset
that builds one image at a time, a DataLoader with worker processes, ``loss.item()`` every
step, and the whole evaluation set on every rank.

Same model (torchvision's ``--arch``, untrained, 1000 classes), data (ddpimg's synthetic
ImageNet-shaped images at ``--image-size``), per-rank batch, precision (fp32), optimiser
(SGD lr 0.1 x global batch / 256, momentum 0.9, weight decay 1e-4) and initial weights
(torch.manual_seed(seed)) as ``train resnet``; BatchNorm per rank, as ddpimg on the CPU.

    python benchmarks/reference/resnet_ddp.py --arch resnet18 --image-size 64
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
import torchvision
from common import SameOrderSampler, report, seed_everything, setup
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

from ddpimg.train.images import IMAGENET_CLASSES, synthetic_imagenet


class Images(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, images: object, count: int) -> None:
        self.images, self.count = images, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, label = self.images.batch(torch.tensor([index]))  # type: ignore[attr-defined]
        return image[0], label[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--train-samples", type=int, default=1280)
    parser.add_argument("--eval-samples", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    rank, world_size = setup()
    train_images, test_images = synthetic_imagenet(
        args.image_size,
        train_samples=args.train_samples,
        eval_samples=args.eval_samples,
        device=torch.device("cpu"),
        channels_last=False,
    )
    train_set = Images(train_images, args.train_samples)
    test_set = Images(test_images, args.eval_samples)
    sampler = SameOrderSampler(len(train_set), args.batch_size, rank, world_size, args.seed)
    train_loader = DataLoader(
        train_set, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers
    )
    test_loader = DataLoader(test_set, batch_size=256, num_workers=args.workers)

    seed_everything(args.seed)
    model = DDP(torchvision.models.get_model(args.arch, weights=None, num_classes=IMAGENET_CLASSES))
    lr = 0.1 * args.batch_size * world_size / 256
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)

    model.train()
    step, losses, began = 0, [], time.perf_counter()
    steady_from = began
    for images, labels in train_loader:
        step += 1
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % 10 == 0 and rank == 0:
            print(f"step {step}: loss {losses[-1]:.4f}", flush=True)
        if step == args.warmup_steps:
            steady_from = time.perf_counter()
        if step == args.max_steps:
            break
    steady_s = time.perf_counter() - steady_from

    eval_began = time.perf_counter()
    model.eval()
    total = 0.0
    with torch.no_grad():
        for images, labels in test_loader:
            total += F.cross_entropy(model(images), labels, reduction="sum").item()
    eval_s = time.perf_counter() - eval_began
    if rank == 0:
        report(
            {
                "steps_per_s": (step - args.warmup_steps) / steady_s,
                "loss_at_k": losses[-1],
                "eval_loss": total / len(test_set),
                "eval_s": eval_s,
            }
        )


if __name__ == "__main__":
    main()
