"""TrainConfigs for the trainer tests, written flat as the command line gives them."""

from __future__ import annotations

from typing import Any

from ddpimg.train.config import TrainConfig
from ddpimg.train.options import option_fields
from ddpimg.train.tasks import TRAINERS


def trainer_config(trainer: str = "mnist", **fields: Any) -> TrainConfig:
    """The config of ``trainer``: those of ``fields`` that are its options go into its
    options object, the others are TrainConfig's."""
    options = TRAINERS[trainer].options
    own = {item.name for item in option_fields(options)}
    return TrainConfig(
        trainer=trainer,
        options=options(**{name: value for name, value in fields.items() if name in own}),
        **{name: value for name, value in fields.items() if name not in own},
    )
