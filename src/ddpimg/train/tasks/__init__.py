"""The bundled trainers, by the name ``train TRAINER`` takes, and the check of a config
against them.

Each trainer declares a ``TrainerSpec`` in its own package (``mnist``, ``toy``, ``resnet``,
``gpt``), next to its code (``<name>.task``). The specs import no torch: the factory imports
the task code when called, so building the command-line parser never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError
from ddpimg.train.config import check_choice
from ddpimg.train.tasks import gpt, mnist, resnet, toy
from ddpimg.train.tasks.spec import TrainerSpec

if TYPE_CHECKING:
    import torch

    from ddpimg.train.config import TrainConfig

# In the order `train --help` lists them.
TRAINERS: dict[str, TrainerSpec] = {
    spec.name: spec for spec in (mnist.SPEC, toy.SPEC, resnet.SPEC, gpt.SPEC)
}


def trainer_for(config: TrainConfig) -> TrainerSpec:
    """The spec of ``config.trainer``, after checking the flags that belong to one trainer:
    DdpimgError for an unknown trainer, another trainer's flag, or a value the
    trainer refuses (``TrainerSpec.check``)."""
    check_choice("trainer", config.trainer, tuple(sorted(TRAINERS)))
    spec = TRAINERS[config.trainer]
    for other in TRAINERS.values():
        for flag in other.flags:
            if other is not spec and getattr(config, flag.field) is not None:
                raise DdpimgError(
                    f"{flag.option} applies to the {other.name} trainer only, got trainer "
                    f"{config.trainer}",
                    hint=f"drop {flag.option}, or run `train {other.name}`",
                )
    spec.check(config)
    return spec


def epoch_schedule(
    config: TrainConfig, optimizer: torch.optim.Optimizer
) -> torch.optim.lr_scheduler.LRScheduler:
    """Every trainer's schedule, as the tutorials have it: the learning rate times ``--gamma``
    (the trainer's ``lr_decay`` when not given) after every epoch."""
    import torch

    gamma = config.lr_decay(TRAINERS[config.trainer].lr_decay)
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=gamma)
