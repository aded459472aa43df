"""What a bundled trainer declares about itself, without importing torch.

One ``TrainerSpec`` per trainer, next to its code (``ddpimg.train.tasks.<name>``): the
command line takes its choices, defaults and help text from the specs (its own flags from
the options dataclass a spec names), the runtime its devices per rank, and
``run_training`` its factory. The defaults here are the ones the
trainer's code uses, so a number is written once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpimg.train.config import DEFAULT_BATCH_SIZE
from ddpimg.train.options import TrainerOptions

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.tasks.base import Task


def one_device(config: TrainConfig) -> int:
    """Devices per rank of a trainer whose model sits on one device."""
    return 1


def no_check(config: TrainConfig) -> None:
    """The check of a trainer that takes every common option's value."""


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
    #: Its own options (flags, help, checks): a dataclass declared with ``option`` fields.
    options: type[TrainerOptions] = TrainerOptions
    devices_per_rank: Callable[[TrainConfig], int] = one_device
    #: Refuses values of the common options that this trainer cannot take (DdpimgError
    #: naming the flag); its own options check themselves.
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
