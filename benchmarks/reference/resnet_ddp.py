"""ResNet trained the way the origin tutorials' DDP image scripts do it: a map-style Dataset
that builds one image at a time, a DataLoader with worker processes, ``loss.item()`` every
step, and the whole evaluation set on every rank.

Same model (torchvision's ``--arch``, untrained, 1000 classes), data (ddpimg's synthetic
ImageNet-shaped images at ``--image-size``), per-rank batch, precision (fp32, or bf16
autocast with ``--bf16``), optimiser (SGD lr 0.1 x global batch / 256, momentum 0.9, weight
decay 1e-4) and initial weights (torch.manual_seed(seed)) as ``train resnet``; BatchNorm
per rank, as ddpimg on the CPU.

    python benchmarks/reference/resnet_ddp.py --arch resnet18 --image-size 64
    python benchmarks/reference/resnet_ddp.py --arch resnet50 --image-size 224 --device cuda \\
        --bf16 --batch-size 256 --workers 8   # on a GPU, as the performance guide trains it
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
import torchvision
from common import SameOrderSampler, device_ids, report, seed_everything, setup
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

from ddpimg.train.tasks.resnet.synthetic import IMAGENET_CLASSES, synthetic_imagenet


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
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--bf16", action="store_true", help="autocast to bfloat16 (AMP)")
    args = parser.parse_args()

    rank, world_size, device = setup(args.device)
    cuda = device.type == "cuda"
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
        train_set,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        pin_memory=cuda,
    )
    test_loader = DataLoader(test_set, batch_size=256, num_workers=args.workers, pin_memory=cuda)

    seed_everything(args.seed)
    model = torchvision.models.get_model(args.arch, weights=None, num_classes=IMAGENET_CLASSES)
    # The PyTorch performance guide's recipe on a GPU: channels_last, cuDNN autotuning, AMP.
    if cuda:
        model = model.to(device, memory_format=torch.channels_last)
        torch.backends.cudnn.benchmark = True
    model = DDP(model, device_ids=device_ids(device))

    def forward(images: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            return model(images)  # type: ignore[no-any-return]

    lr = 0.1 * args.batch_size * world_size / 256
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)

    model.train()
    step, losses, began = 0, [], time.perf_counter()
    steady_from = began
    for cpu_images, cpu_labels in train_loader:
        images, labels = cpu_images, cpu_labels
        if cuda:
            images = cpu_images.to(device, non_blocking=True, memory_format=torch.channels_last)
            labels = cpu_labels.to(device, non_blocking=True)
        step += 1
        optimizer.zero_grad()
        loss = F.cross_entropy(forward(images), labels)
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
        for cpu_images, cpu_labels in test_loader:
            images, labels = cpu_images.to(device), cpu_labels.to(device)
            total += F.cross_entropy(forward(images), labels, reduction="sum").float().item()
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
