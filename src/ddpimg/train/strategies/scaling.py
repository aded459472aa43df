"""Loss scaling for ``--precision fp16``: what keeps small fp16 gradients from flushing to zero.

fp16 has 5 exponent bits, so gradients below about 6e-8 vanish. The loss is multiplied by
a scale before backward and the gradients divided by it before the step; a step whose
gradients overflowed is skipped and the scale halved, and after ``growth_interval`` clean
steps it doubles (torch's dynamic scaling, as in the AMP recipe). bf16 and fp32 keep
fp32's exponent range and need none of this: ``LossScaler.disabled()`` passes through.

Every rank sees the same all-reduced gradients (DDP) or checks its shard and agrees with
the others (FSDP's ``ShardedGradScaler``), so all ranks skip the same steps and a run
follows the same trajectory whatever its topology.
"""

from __future__ import annotations

from typing import Any

import torch


class LossScaler:
    """A GradScaler (or a pass-through) with the three calls a strategy makes."""

    def __init__(self, scaler: torch.amp.GradScaler | None) -> None:
        self._scaler = scaler

    @classmethod
    def disabled(cls) -> LossScaler:
        return cls(None)

    @classmethod
    def for_precision(cls, precision: str, device: torch.device, sharded: bool) -> LossScaler:
        """fp16: dynamic scaling on ``device``'s type (``sharded``: for FSDP's sharded
        gradients); anything else: disabled."""
        if precision != "fp16":
            return cls.disabled()
        if sharded:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            return cls(ShardedGradScaler(device.type))
        return cls(torch.amp.GradScaler(device.type))

    @property
    def enabled(self) -> bool:
        return self._scaler is not None

    def backward(self, loss: torch.Tensor) -> None:
        scaled = loss if self._scaler is None else self._scaler.scale(loss)
        torch.autograd.backward(scaled)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale, step unless a gradient overflowed, and adjust the scale."""
        if self._scaler is None:
            optimizer.step()
            return
        self._scaler.step(optimizer)
        self._scaler.update()

    def state_dict(self) -> dict[str, Any]:
        return {} if self._scaler is None else self._scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the scale and its growth counter (a checkpoint without them: keep the
        initial scale, as a run that switched to fp16 starts)."""
        if self._scaler is not None and state:
            self._scaler.load_state_dict(state)
