"""The bundled trainers, by the name ``train TRAINER`` takes, the check of a config against
them, and what all their options together make: the flat ``arguments`` of manifest.json.

Each trainer declares a ``TrainerSpec`` and its options dataclass in its own package
(``mnist``, ``toy``, ``resnet``, ``gpt``), next to its code (``<name>.task``). The specs
import no torch: the factory imports the task code when called, so building the
command-line parser never imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ddpimg.errors import DdpimgError
from ddpimg.train.options import TrainerOptions, check_choice, option_fields
from ddpimg.train.tasks import gpt, mnist, resnet, toy
from ddpimg.train.tasks.spec import TrainerSpec

if TYPE_CHECKING:
    import torch

    from ddpimg.train.config import TrainConfig

# In the order `train --help` lists them.
TRAINERS: dict[str, TrainerSpec] = {
    spec.name: spec for spec in (mnist.SPEC, toy.SPEC, resnet.SPEC, gpt.SPEC)
}
# Every trainer's options by field name; a name is one trainer's (tests/train/test_options.py).
TRAINER_OPTIONS: tuple[str, ...] = tuple(
    item.name for spec in TRAINERS.values() for item in option_fields(spec.options)
)
# Those that may differ between a run and its resumption (``option(free_to_change=True)``).
FREE_TO_CHANGE_OPTIONS = frozenset(
    item.name
    for spec in TRAINERS.values()
    for item in option_fields(spec.options)
    if item.flag.free_to_change
)


def trainer_for(config: TrainConfig) -> TrainerSpec:
    """The spec of ``config.trainer``, after checking the config against it: DdpimgError for
    an unknown trainer, another trainer's options, or a value the trainer refuses
    (``TrainerSpec.check``)."""
    check_choice("trainer", config.trainer, tuple(sorted(TRAINERS)))
    spec = TRAINERS[config.trainer]
    if type(config.options) not in (spec.options, TrainerOptions):
        raise _foreign_options(config.options, spec.name)
    spec.check(config)
    return spec


def trainer_options(trainer: str, values: Mapping[str, Any]) -> TrainerOptions:
    """``trainer``'s options from ``values``: every trainer's option by field name (as the
    command line parses them), None when its flag was not given. DdpimgError for a flag of
    another trainer, or a value the options refuse."""
    spec = TRAINERS[trainer]
    for other in TRAINERS.values():
        for item in option_fields(other.options):
            if other is not spec and values[item.name] is not None:
                raise _not_this_trainers(item.option, other.name, trainer)
    return spec.options(**{item.name: values[item.name] for item in option_fields(spec.options)})


def arguments_json(config: TrainConfig) -> dict[str, Any]:
    """``config`` as manifest.json's ``arguments`` (and the checkpoint fingerprint's source):
    flat JSON values, with every trainer's options, None but those of ``config.trainer``."""
    values = config.to_json()
    return values | {name: None for name in TRAINER_OPTIONS if name not in values}


def _foreign_options(options: TrainerOptions, trainer: str) -> DdpimgError:
    """The error for another trainer's options in a config of ``trainer``: it names the
    first of their flags that was given, as the command line would."""
    kind = type(options)
    owner = next((s.name for s in TRAINERS.values() if s.options is kind), kind.__name__)
    for item in option_fields(kind):
        if getattr(options, item.name) is not None:
            return _not_this_trainers(item.option, owner, trainer)
    return DdpimgError(
        f"the {owner} trainer's options given to trainer {trainer}",
        hint=f"give trainer {owner}, or {trainer}'s own options",
    )


def _not_this_trainers(flag: str, owner: str, trainer: str) -> DdpimgError:
    return DdpimgError(
        f"{flag} applies to the {owner} trainer only, got trainer {trainer}",
        hint=f"drop {flag}, or run `train {owner}`",
    )


def epoch_schedule(
    config: TrainConfig, optimizer: torch.optim.Optimizer
) -> torch.optim.lr_scheduler.LRScheduler:
    """Every trainer's schedule, as the tutorials have it: the learning rate times ``--gamma``
    (the trainer's ``lr_decay`` when not given) after every epoch."""
    import torch

    gamma = config.lr_decay(TRAINERS[config.trainer].lr_decay)
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=gamma)
