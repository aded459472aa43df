"""What a bundled trainer declares about itself, without importing torch.

One ``TrainerSpec`` per trainer, next to its code (``ddpimg.train.tasks.<name>``): the
command line takes its choices, defaults and help text from the specs, the runtime its
devices per rank, and ``run_training`` its factory. The defaults here are the ones the
trainer's code uses, so a number is written once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpimg.train.config import DEFAULT_BATCH_SIZE

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Task


@dataclass(frozen=True)
class TrainerFlag:
    """A flag that only one trainer takes. Left out, its ``TrainConfig`` field is None and
    the trainer uses ``default`` (as ``train --help`` shows it)."""

    option: str
    help: str
    default: str
    metavar: str | None = None
    type: Callable[[str], object] | None = None
    choices: tuple[str, ...] | None = None
    #: ``--flag`` / ``--no-flag`` (the field is then True, False or None).
    negatable: bool = False

    @property
    def field(self) -> str:
        """The ``TrainConfig`` field the flag sets."""
        return self.option.removeprefix("--").replace("-", "_")


def one_device(config: TrainConfig) -> int:
    """Devices per rank of a trainer whose model sits on one device."""
    return 1


def no_check(config: TrainConfig) -> None:
    """The check of a trainer without flags of its own."""


@dataclass(frozen=True)
class TrainerSpec:
    """One bundled trainer (``train NAME``)."""

    name: str
    #: Builds the task; imports the trainer's code (and torch) only when called.
    factory: Callable[[TrainConfig, DistContext, BatchLayout], Task]
    #: The optimizer's name and its default ``--lr`` (``learning_rate_note``: exceptions).
    optimizer: str
    learning_rate: float
    learning_rate_note: str = ""
    #: Default ``--gamma``: the learning rate factor after every epoch.
    lr_decay: float = 1.0
    default_batch_size: int = DEFAULT_BATCH_SIZE
    #: ``--precision auto`` on a GPU: bf16 autocast (else fp32, as on the CPU).
    bf16_on_gpu: bool = False
    #: What ``--data PATH`` is for this trainer; None: synthetic data only.
    data_source: str | None = None
    flags: tuple[TrainerFlag, ...] = ()
    devices_per_rank: Callable[[TrainConfig], int] = one_device
    #: Checks the values of this trainer's own flags (DdpimgError naming the flag).
    check: Callable[[TrainConfig], None] = no_check

    def auto_precision(self, device_type: str) -> str:
        """What ``--precision auto`` means for this trainer on ``device_type`` ('cuda', 'cpu')."""
        return "bf16" if self.bf16_on_gpu and device_type == "cuda" else "fp32"


def learning_rate_text(rate: float) -> str:
    """A learning rate as the tutorials write it: 1.0, 0.1, 6e-4."""
    if rate >= 0.01:
        return repr(rate)
    mantissa, exponent = f"{rate:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
