"""torch.distributed.checkpoint (FSDP's checkpoints) read without unpickling code.

DCP itself unpickles two things with plain pickle: the ``.metadata`` file
(``FileSystemReader.read_metadata``) and every non-tensor value, such as an optimizer's
learning rate (``DefaultLoadPlanner.load_bytes``, ``torch.load(weights_only=False)``).
``SafeFileSystemReader`` reads the metadata with ``safeload.read_dcp_metadata`` and
``SafeLoadPlanner`` reads each value with ``weights_only=True`` before DCP does; tensors DCP
already reads with ``weights_only=True``. ``load`` (resume) and ``read_model_state``
(export) use both, and report a refused file as ``safeload`` does.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import StorageMeta, TensorStorageMetadata
from torch.distributed.checkpoint.planner import ReadItem
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from ddpimg.errors import DdpimgError
from ddpimg.train.checkpoint.safeload import load_tensors, read_dcp_metadata

# DCP's file names (torch.distributed.checkpoint.filesystem): the global metadata, and the
# rank-local one DCP falls back to when the global one cannot be read.
METADATA = ".metadata"


def _metadata_file(directory: Path, rank: int | None) -> Path:
    return directory / (METADATA if rank is None else f"__{rank}{METADATA}")


class SafeFileSystemReader(FileSystemReader):
    """DCP's file reader, with the metadata unpickled by ``read_dcp_metadata``."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.directory = directory

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        metadata = read_dcp_metadata(_metadata_file(self.directory, kwargs.get("rank")))
        # What FileSystemReader.read_metadata does after unpickling.
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner; each non-tensor value must load with
    ``weights_only=True`` before DCP's own ``torch.load`` of the same bytes sees it."""

    def __init__(self, directory: Path, **options: Any) -> None:
        super().__init__(**options)
        self.directory = directory

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        load_tensors(self.directory, stream=value)
        value.seek(0)
        super().load_bytes(read_item, value)


def _raise_refusal(err: CheckpointException) -> None:
    """Re-raise a ``DdpimgError`` that a rank's reader raised inside DCP, which collects
    every rank's exception into one ``CheckpointException``."""
    for exception, _ in err.failures.values():
        if isinstance(exception, DdpimgError):
            raise exception


def load(state: dict[str, Any], directory: Path) -> None:
    """``torch.distributed.checkpoint.load`` of ``directory`` into ``state`` (in place,
    collective when a process group exists) with the safe reader and planner."""
    read_dcp_metadata(_metadata_file(directory, None))  # a refusal, before DCP wraps it
    try:
        dcp_load(
            state,
            storage_reader=SafeFileSystemReader(directory),
            planner=SafeLoadPlanner(directory),
        )
    except CheckpointException as err:
        _raise_refusal(err)
        raise


def read_model_state(directory: Path, prefix: str) -> dict[str, torch.Tensor]:
    """The full (unsharded) tensors of ``directory`` whose key starts with ``prefix``, keyed
    without it, read in this process alone (no process group), as FSDP saved them."""
    metadata = read_dcp_metadata(_metadata_file(directory, None))
    state: dict[str, Any] = {
        key: torch.empty(tuple(entry.size), dtype=entry.properties.dtype)
        for key, entry in metadata.state_dict_metadata.items()
        if key.startswith(prefix) and isinstance(entry, TensorStorageMetadata)
    }
    try:
        with warnings.catch_warnings():
            # DCP warns that it loads in one process, which is what no_dist asks for.
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp_load(
                state,
                storage_reader=SafeFileSystemReader(directory),
                planner=SafeLoadPlanner(directory, allow_partial_load=True),
                no_dist=True,
            )
    except CheckpointException as err:
        _raise_refusal(err)
        raise
    return {key.removeprefix(prefix): tensor for key, tensor in state.items()}
