"""``train toy``'s own option and the defaults its spec (the package) and its task share;
imports no torch, and neither the package nor the task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError
from ddpimg.train.options import TrainerOptions, option

if TYPE_CHECKING:
    from ddpimg.train.options import HoldsOptions

# The tutorial's Adam learning rate.
LEARNING_RATE = 1e-4
DEFAULT_GPUS_PER_REPLICA = 2
GPUS_PER_REPLICA = (1, 2)


@dataclass(frozen=True)
class ToyOptions(TrainerOptions):
    """``train toy``'s own flag."""

    gpus_per_replica: int | None = option(
        "GPUs each process drives: 2 puts the head and the tail on two GPUs; GPUs per node "
        "must be processes per node times this",
        default=str(DEFAULT_GPUS_PER_REPLICA),
        metavar="|".join(map(str, GPUS_PER_REPLICA)),
    )

    def check(self) -> None:
        if self.gpus_per_replica is not None and self.gpus_per_replica not in GPUS_PER_REPLICA:
            raise DdpimgError(
                f"--gpus-per-replica must be 1 or 2, got {self.gpus_per_replica}",
                hint="the toy model has two parts, head and tail: 2 puts them on two GPUs, 1 "
                "on one",
            )


def gpus_per_replica(config: HoldsOptions) -> int:
    """GPUs each process drives (``--gpus-per-replica``)."""
    return ToyOptions.of(config).gpus_per_replica or DEFAULT_GPUS_PER_REPLICA
