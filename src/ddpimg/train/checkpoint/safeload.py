"""Reading checkpoint files without running code from them.

A checkpoint is data a user may have been handed (shared, downloaded, copied between
clusters). Pickle, which ``torch.save`` and torch.distributed.checkpoint's ``.metadata``
use, can call any Python function while loading, so every checkpoint file ddpimg reads goes
through one of two readers here:

* ``load_tensors``: ``torch.load(weights_only=True)``, torch's own restricted unpickler
  (tensors, numbers, strings, lists, tuples, dicts), plus the few library classes a format
  needs, named one by one (``extra_globals``: DeepSpeed's ZeRO optimizer states hold its
  loss scaler, ZeRO stage enum and fragment addresses).
* ``read_dcp_metadata``: torch.distributed.checkpoint's ``.metadata`` through an
  unpickler that builds only DCP's own metadata classes (``DCP_METADATA_GLOBALS``), torch
  sizes, dtypes and layouts, and paths.

Anything else in a file is refused before it is built: a ``DdpimgError`` (exit status 2)
naming the file, "not a checkpoint ddpimg can load safely", and what it asked for.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

from ddpimg.errors import DdpimgError

if TYPE_CHECKING:
    import torch

REFUSED = "not a checkpoint ddpimg can load safely"
HINT = (
    "a checkpoint holds tensors and plain values only; this file also asks to build other "
    "Python objects, which could run code on your account: ask its author for a copy "
    "written by ddpimg (or by torch.save of tensors), or go on without it (--resume none)"
)

# torch.distributed.checkpoint's metadata: (module, name) of every class or function a
# ``.metadata`` pickle written by torch 2.x refers to, and nothing else. torch dtypes are
# allowed by name below (``torch.float32`` pickles as the global ``torch.float32``).
DCP_METADATA_GLOBALS = frozenset(
    {
        ("torch.distributed.checkpoint.metadata", "Metadata"),
        ("torch.distributed.checkpoint.metadata", "MetadataIndex"),
        ("torch.distributed.checkpoint.metadata", "StorageMeta"),
        ("torch.distributed.checkpoint.metadata", "TensorProperties"),
        ("torch.distributed.checkpoint.metadata", "TensorStorageMetadata"),
        ("torch.distributed.checkpoint.metadata", "BytesStorageMetadata"),
        ("torch.distributed.checkpoint.metadata", "ChunkStorageMetadata"),
        ("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"),
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch.distributed.checkpoint.filesystem", "_StoragePrefix"),
        ("torch.serialization", "_get_layout"),
        ("torch", "Size"),
        ("pathlib", "PosixPath"),
        ("pathlib", "PurePosixPath"),
        ("collections", "OrderedDict"),
    }
)


def refused(path: Path, reason: str) -> DdpimgError:
    """The error for a checkpoint file that would need more than data to load."""
    return DdpimgError(f"{path}: {REFUSED} ({reason})", hint=HINT)


def load_tensors(
    path: Path,
    map_location: torch.device | str | Callable[..., Any] = "cpu",
    extra_globals: Sequence[type] = (),
    stream: IO[bytes] | None = None,
) -> Any:
    """``torch.load(path, weights_only=True)`` (or of ``stream``, a part of the file
    ``path``), with ``extra_globals`` allowed besides torch's own; a file that asks for
    anything else is refused (``refused``)."""
    import torch

    try:
        with torch.serialization.safe_globals(list(extra_globals)):
            return torch.load(
                path if stream is None else stream, map_location=map_location, weights_only=True
            )
    except pickle.UnpicklingError as err:
        raise refused(path, _weights_only_reason(str(err))) from err


def _weights_only_reason(message: str) -> str:
    """What torch's weights-only unpickler refused, from its long message (the rest of it
    is advice to load with weights_only=False, which is what must not happen here)."""
    found = re.search(r"Unsupported global: GLOBAL (\S+)", message)
    if found:
        return f"it asks for {found.group(1)}"
    found = re.search(r"WeightsUnpickler error: ([^\n]+)", message)
    return found.group(1).strip() if found else "torch's weights-only load failed"


class _DcpMetadataUnpickler(pickle.Unpickler):
    """Builds only what ``DCP_METADATA_GLOBALS`` names, and torch dtypes."""

    def __init__(self, stream: IO[bytes], path: Path) -> None:
        super().__init__(stream)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        import torch

        if (module, name) in DCP_METADATA_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise refused(self.path, f"its metadata asks for {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise refused(self.path, "its metadata refers to persistent objects")


def read_dcp_metadata(path: Path) -> Any:
    """torch.distributed.checkpoint's ``Metadata`` from the ``.metadata`` file ``path``,
    unpickled with only DCP's own classes allowed and checked to point at files inside its
    folder."""
    from torch.distributed.checkpoint.metadata import Metadata

    try:
        with path.open("rb") as stream:
            metadata = _DcpMetadataUnpickler(stream, path).load()
    except DdpimgError:
        raise
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError, AttributeError) as err:
        raise DdpimgError(
            f"{path}: not a torch.distributed.checkpoint metadata file ({err})",
            hint="the checkpoint is damaged; resume from another one (--resume PATH) or "
            "start over (--resume none)",
        ) from err
    if not isinstance(metadata, Metadata) or not isinstance(metadata.state_dict_metadata, dict):
        raise refused(path, f"it holds a {type(metadata).__name__}, not DCP metadata")
    _check_storage_paths(path, metadata.storage_data)
    return metadata


def _check_storage_paths(path: Path, storage: Any) -> None:
    """Every data file the metadata names lies inside the checkpoint's folder."""
    if not isinstance(storage, dict):
        raise refused(path, f"its storage index is a {type(storage).__name__}")
    for info in storage.values():
        relative = getattr(info, "relative_path", None)
        if not isinstance(relative, str):
            raise refused(path, f"a storage entry has no file name ({info!r})")
        parts = PurePosixPath(relative).parts
        if not parts or PurePosixPath(relative).is_absolute() or ".." in parts:
            raise refused(path, f"a storage entry points outside the checkpoint: {relative!r}")
