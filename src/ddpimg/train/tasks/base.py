"""What a trainer provides so that one loop can train it: data, model, loss, optimizer."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    from torch import nn

    from ddpimg.train.dropout import DropoutContext
    from ddpimg.train.sharding import BatchPlan

Batch = tuple["torch.Tensor", "torch.Tensor"]


class Dataset(Protocol):
    """A training or evaluation set: it knows its size and loads the batches of a plan.

    How it holds its samples is its own business: generated on the device, decoded once
    into memory (small sets), or read from storage batch by batch in worker processes. Only
    the samples a plan names are ever loaded, so a rank's memory and start-up time need not
    grow with the dataset."""

    def __len__(self) -> int: ...

    def batches(self, plan: BatchPlan) -> Generator[Batch]:
        """Model inputs and targets of each batch of ``plan``, in order, on the rank's
        device. The loop may stop iterating early (it then closes the iterator)."""
        ...

    def skipped(self) -> int:
        """Samples this rank has seen replaced so far because they could not be read (the
        user asked to skip bad samples); 0 for sets that cannot have bad samples."""
        ...


class InMemoryDataset(ABC):
    """A ``Dataset`` whose samples all sit in tensors on one device (or are generated
    there): a subclass gives its length, ``device`` and ``batch(rows)``. The order is copied
    to the device once per plan, so a step costs no host-to-device copy."""

    @abstractmethod
    def __len__(self) -> int: ...

    @property
    @abstractmethod
    def device(self) -> torch.device: ...

    @abstractmethod
    def batch(self, rows: torch.Tensor) -> Batch:
        """Model inputs and targets of the samples ``rows`` (indices on ``device``)."""

    def batches(self, plan: BatchPlan) -> Generator[Batch]:
        order = plan.order.to(self.device)
        for where in plan.slices:
            yield self.batch(order[where])

    def skipped(self) -> int:
        return 0


class Task(Protocol):
    """One bundled trainer (``train TRAINER``), built by its ``TrainerSpec.factory`` from
    the config and the distributed context (rank, world size, this rank's device): a task
    reads them from there, never from torch.distributed's global state."""

    eval_batch_size: int

    def datasets(self) -> tuple[Dataset, Dataset]:
        """The training and evaluation sets."""
        ...

    def data_facts(self) -> dict[str, Any]:
        """What manifest.json records about the data (after ``datasets``): its source, the
        sample counts, and how it is read."""
        ...

    def build_model(self, dropout: DropoutContext) -> nn.Module:
        """A freshly initialised model (from torch's global RNG, seeded by the loop) on the
        rank's device; its random layers draw through ``dropout`` (per-sample masks of the
        global batch). A model spread over several devices (``toy``) takes its inputs on the
        rank's device and returns its output there, so the loop and the collectives see one
        device per rank."""
        ...

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Per-sample losses (no reduction): the loop takes the mean to train and the sum to
        report the exact global mean."""
        ...

    def correct(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The number of correct predictions in a batch, as a 0-d tensor."""
        ...

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        """The optimizer of ``model``'s parameters; the strategy calls it once it has
        wrapped (or sharded) the model, with the module whose parameters are trained."""
        ...

    def fingerprint(self) -> dict[str, int]:
        """What besides the options decides the model or its trajectory, recorded in every
        checkpoint's fingerprint so that a resume that changes it is refused by name; empty
        when the options are all. ``batchnorm_samples``: how many samples a model's
        batch-statistics layers (BatchNorm) normalise over in one forward pass (a model
        without them trains the same whatever the micro-batch; one with them on statistics
        of this many samples). ``vocabulary``: the tokens a language model reads and
        predicts, which its data or initial weights decide."""
        ...

    def throughput(self, samples_per_s: float, world_size: int) -> dict[str, float | None]:
        """Task-specific rates derived from the training throughput of the whole world
        (images/s, tokens/s, model-FLOPs utilisation), added to train lines and the summary;
        empty when the samples are all there is to count."""
        ...
