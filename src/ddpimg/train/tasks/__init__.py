"""The bundled trainers, by the name ``train TRAINER`` takes.

Each factory imports its module (and torch) only when called, so building the command-line
parser never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpimg.train.options import TrainConfig
    from ddpimg.train.tasks.base import Task


def _mnist(config: TrainConfig) -> Task:
    from ddpimg.train.tasks.mnist import MnistTask

    return MnistTask(config)


def _toy(config: TrainConfig) -> Task:
    from ddpimg.train.tasks.toy import ToyTask

    return ToyTask(config)


def _resnet(config: TrainConfig) -> Task:
    from ddpimg.train.tasks.resnet import ResnetTask

    return ResnetTask(config)


def _gpt(config: TrainConfig) -> Task:
    from ddpimg.train.tasks.gpt import GptTask

    return GptTask(config)


TASKS: dict[str, Callable[[TrainConfig], Task]] = {
    "mnist": _mnist,
    "toy": _toy,
    "resnet": _resnet,
    "gpt": _gpt,
}
