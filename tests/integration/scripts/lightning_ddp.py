"""A user's PyTorch Lightning script, as the CSC tutorial writes one: Trainer(strategy="ddp",
devices=N, num_nodes=M). Each rank writes what Lightning resolved, how many steps it took
and a checksum of its weights (equal on every rank after DDP's gradient averaging).

usage: lightning_ddp.py OUT_DIR DEVICES NUM_NODES [--max-steps N] [--step-sleep S]
                        [--requeue-signal USR2] [--marker-step N]

With --requeue-signal, Lightning's SLURM auto-requeue is asked to listen to that signal (its
default is SIGUSR1). Each rank's report also holds the training loss of every step
(``losses``, by global step, this rank's own batch). ``--marker-step N``: rank 0 creates
OUT_DIR/step-K once K steps are done, for every K >= N (tests signal after one).
"""

import argparse
import json
import os
import signal
import socket
import time

import lightning as L
import torch
from lightning.pytorch.plugins.environments import SLURMEnvironment
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("devices", type=int)
parser.add_argument("num_nodes", type=int)
parser.add_argument("--max-steps", type=int, default=4)
parser.add_argument("--step-sleep", type=float, default=0.0)
parser.add_argument("--requeue-signal")
parser.add_argument("--marker-step", type=int, default=2)
args = parser.parse_args()


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

        self.losses: dict[int, float] = {}

    def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
        if self.global_step >= args.marker_step and self.global_rank == 0:
            open(os.path.join(args.out, f"step-{self.global_step}"), "w").close()
        time.sleep(args.step_sleep)
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.losses[self.global_step + 1] = float(loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


plugins = []
if args.requeue_signal:
    signum = getattr(signal, f"SIG{args.requeue_signal}")
    plugins.append(SLURMEnvironment(auto_requeue=True, requeue_signal=signum))
generator = torch.Generator().manual_seed(0)
data = TensorDataset(
    torch.randn(4096, 8, generator=generator), torch.randn(4096, 1, generator=generator)
)
L.seed_everything(0)
model = Regression()
trainer = L.Trainer(
    accelerator="cpu",
    strategy="ddp",
    devices=args.devices,
    num_nodes=args.num_nodes,
    max_steps=args.max_steps,
    default_root_dir=args.out,
    plugins=plugins,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    log_every_n_steps=1,
)
# A resumable loader: a run resumed from a mid-epoch checkpoint continues the epoch's data
# exactly (with a plain DataLoader Lightning starts the epoch's data over, and warns).
trainer.fit(model, StatefulDataLoader(data, batch_size=16))
report = {
    "global_rank": trainer.global_rank,
    "world_size": trainer.world_size,
    "local_rank": trainer.local_rank,
    "node_rank": trainer.node_rank,
    "environment": type(trainer.strategy.cluster_environment).__name__,
    "steps": trainer.global_step,
    "checksum": float(sum(p.detach().sum() for p in model.parameters())),
    "host": socket.gethostname(),
    "master": os.environ.get("MASTER_ADDR", ""),
    "restart": int(os.environ.get("SLURM_RESTART_COUNT", "0")),
    "losses": model.losses,
}
with open(os.path.join(args.out, f"rank{trainer.global_rank}.json"), "w") as file:
    json.dump(report, file)
