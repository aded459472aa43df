"""DeepSpeed checkpoint files read without unpickling code (imports deepspeed).

DeepSpeed 0.19.8 reads its checkpoints with ``torch.load(weights_only=False)``: in
``TorchCheckpointEngine.load`` (every file ``engine.load_checkpoint`` reads: the module
states and each ZeRO rank's optimizer states) and, for ``ddpimg export``, in
``deepspeed.utils.zero_to_fp32``. So a resume reads through ``SafeCheckpointEngine``, the
engine's own with a ``load`` that is ``torch.load(weights_only=True)`` with DeepSpeed's
few classes allowed (``checkpoint_globals``), and an export checks every file the same way
(``check_files``) before DeepSpeed's converter opens it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

from ddpimg.train.checkpoint.safeload import load_tensors


def checkpoint_globals() -> list[type]:
    """The classes a DeepSpeed checkpoint holds besides tensors and plain values (found in
    the files of ZeRO 0-3, fp32 and bf16, with ``torch.serialization.
    get_unsafe_globals_in_checkpoint``): the ZeRO stage, the loss scaler kept with the
    optimizer state (dynamic for fp16), and ZeRO's fragment addresses. Data classes and an
    enum: building them runs none of their methods."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [ZeroStageEnum, LossScaler, DynamicLossScaler, fragment_address]


class SafeCheckpointEngine(TorchCheckpointEngine):  # type: ignore[misc]
    """DeepSpeed's torch checkpoint engine; it saves as DeepSpeed does and loads only data."""

    def load(
        self, path: str, map_location: torch.device | str | Callable[..., Any] | None = None
    ) -> Any:
        return load_tensors(Path(path), map_location or "cpu", checkpoint_globals())


def use_safe_loading(engine: Any) -> None:
    """Give ``engine`` (a ``DeepSpeedEngine``) a ``SafeCheckpointEngine``. The config
    ddpimg writes asks for no other checkpoint engine, so DeepSpeed built its torch one;
    any other is an error here rather than a silent unsafe load."""
    current = engine.checkpoint_engine
    if type(current) is not TorchCheckpointEngine:
        raise RuntimeError(
            f"DeepSpeed chose the checkpoint engine {type(current).__name__}; ddpimg loads "
            "checkpoints only through its safe version of TorchCheckpointEngine"
        )
    # _config: the DeepSpeedConfig the engine built its own checkpoint engine from.
    engine.checkpoint_engine = SafeCheckpointEngine(engine._config)


def check_files(directory: Path) -> None:
    """Load every ``.pt`` file under ``directory`` as ``SafeCheckpointEngine`` would: a
    refused file raises before DeepSpeed's own code (``zero_to_fp32``) unpickles it."""
    allowed = checkpoint_globals()
    for path in sorted(directory.rglob("*.pt")):
        load_tensors(path, "cpu", allowed)
