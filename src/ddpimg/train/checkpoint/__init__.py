"""Checkpoints of a training run: atomic, verified, resumable on any topology the strategy
allows.

Layout of ``<out>/checkpoints/step-NNNNNNNN/`` (NNNNNNNN: optimizer steps done)::

    <strategy>/            the strategy's own format (Strategy.save / Strategy.load):
                           ddp/model.pt; deepspeed/engine/...; fsdp/ (torch.distributed.checkpoint)
    loop.json              LoopState (epoch, step, position in the epoch), world size, global
                           batch, config fingerprint, metrics.jsonl length (rank 0)
    loop.pt                the learning-rate scheduler's state (rank 0)
    rng/rank-NNNNN.pt      each rank's torch (CPU, CUDA), Python and NumPy RNG states
    complete.json          written last: size and SHA-256 of every other file

Checkpoints are written every ``--checkpoint-every`` steps, after every epoch (evaluation
and scheduler step done) and on preemption; the newest ``--keep-checkpoints`` stay.
``files`` handles the directories (no torch), ``state`` what they hold, ``resume`` the
choice of ``--resume auto|PATH|none`` and ``saver`` the collective save and restore.
"""

from __future__ import annotations

from ddpimg.train.checkpoint.resume import Resume, resolve_resume
from ddpimg.train.checkpoint.state import LoopState

__all__ = ["LoopState", "Resume", "resolve_resume"]
