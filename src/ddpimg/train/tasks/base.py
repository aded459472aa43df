"""What a trainer provides so that one loop can train it: data, model, loss, optimizer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch
    from torch import nn

    from ddpimg.train.dropout import DropoutContext


class Dataset(Protocol):
    """A whole dataset held in memory on the training device."""

    def __len__(self) -> int: ...

    def batch(self, rows: torch.Tensor | slice) -> tuple[torch.Tensor, torch.Tensor]:
        """Model inputs and targets of the samples ``rows`` (indices or a slice)."""
        ...


class Task(Protocol):
    """One bundled trainer (``train TRAINER``), built by its ``TrainerSpec.factory`` from
    the config and the distributed context (rank, world size, this rank's device): a task
    reads them from there, never from torch.distributed's global state."""

    eval_batch_size: int

    def load(self) -> tuple[Dataset, Dataset]:
        """The training and evaluation sets, on the rank's device."""
        ...

    def build_model(self, dropout: DropoutContext) -> nn.Module:
        """A freshly initialised model (from torch's global RNG, seeded by the loop) on the
        rank's device; its dropout layers draw their masks through ``dropout``. A model
        spread over several devices (``toy``) takes its inputs on the rank's device and
        returns its output there, so the loop and the collectives see one device per rank."""
        ...

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Per-sample losses (no reduction): the loop takes the mean to train and the sum to
        report the exact global mean."""
        ...

    def correct(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The number of correct predictions in a batch, as a 0-d tensor."""
        ...

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer: ...

    def throughput(self, samples_per_s: float, world_size: int) -> dict[str, float | None]:
        """Task-specific rates derived from the training throughput of the whole world
        (images/s, tokens/s, model-FLOPs utilisation), added to train lines and the summary;
        empty when the samples are all there is to count."""
        ...
