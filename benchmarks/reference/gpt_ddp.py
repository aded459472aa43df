"""A GPT trained the way a plain PyTorch DDP script does it (the nanoGPT / PyTorch DDP
tutorial pattern): a map-style Dataset of token windows, a DataLoader with worker
processes, ``loss.item()`` every step, and the whole evaluation set on every rank.

Same model (ddpimg's Gpt, --size tiny), data (ddpimg's synthetic token windows), per-rank
batch, precision (fp32), optimiser (AdamW lr 1e-3, betas 0.9/0.95, weight decay 0.1 on
matrices only) and initial weights (torch.manual_seed(seed)) as ``train gpt --size tiny``.

    python benchmarks/reference/gpt_ddp.py --max-steps 40 --warmup-steps 10
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from common import SameOrderSampler, report, seed_everything, setup
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

from ddpimg.train.tasks.gpt import SIZES
from ddpimg.train.tasks.gpt.data import synthetic_sequences
from ddpimg.train.tasks.gpt.model import Gpt


class TokenWindows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, split: int, count: int, seq_len: int, vocab: int) -> None:
        self.windows = synthetic_sequences(split, count, seq_len, vocab)

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        window = self.windows[index]
        return window[:-1], window[1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--train-samples", type=int, default=4000)
    parser.add_argument("--eval-samples", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    rank, world_size, _ = setup()
    config = SIZES["tiny"].shape
    seq_len, vocab = config.block_size, config.vocab_size
    train_set = TokenWindows(0, args.train_samples, seq_len, vocab)
    test_set = TokenWindows(1, args.eval_samples, seq_len, vocab)
    sampler = SameOrderSampler(len(train_set), args.batch_size, rank, world_size, args.seed)
    train_loader = DataLoader(
        train_set, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers
    )
    test_loader = DataLoader(test_set, batch_size=64, num_workers=args.workers)

    seed_everything(args.seed)
    model = DDP(Gpt(config))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-3,
        betas=(0.9, 0.95),
    )

    model.train()
    step, losses, began = 0, [], time.perf_counter()
    steady_from = began
    for x, y in train_loader:
        step += 1
        optimizer.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
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
        for x, y in test_loader:
            logits = model(x)
            total += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
    eval_s = time.perf_counter() - eval_began
    if rank == 0:
        report(
            {
                "steps_per_s": (step - args.warmup_steps) / steady_s,
                "loss_at_k": losses[-1],
                "eval_loss": total / (len(test_set) * seq_len),
                "eval_s": eval_s,
            }
        )


if __name__ == "__main__":
    main()
