from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from ddpimg.train.strategies.scaling import LossScaler


def one_step(scaler: LossScaler, loss_factor: float) -> tuple[nn.Linear, torch.Tensor]:
    """A linear layer before and after one scaled step on ``loss_factor`` x its output."""
    torch.manual_seed(0)
    layer = nn.Linear(3, 1)
    before = layer.weight.detach().clone()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    scaler.backward(layer(torch.ones(2, 3)).sum() * loss_factor)
    scaler.step(optimizer)
    return layer, before


@pytest.mark.parametrize("precision", ["fp32", "bf16", "auto"])
def test_only_fp16_scales(precision: str) -> None:
    scaler = LossScaler.for_precision(precision, torch.device("cpu"), sharded=False)
    assert not scaler.enabled
    assert scaler.state_dict() == {}
    layer, before = one_step(scaler, 1.0)
    # Unscaled SGD: w - 0.1 * d(sum of 2 outputs)/dw = w - 0.2 (measured: equal to the bit;
    # allclose's default allows a few rounding steps, a scaled gradient misses by 0.2 x scale).
    assert torch.allclose(layer.weight, before - 0.2)


@pytest.mark.parametrize("sharded", [False, True])
def test_fp16_steps_with_the_true_gradient(sharded: bool, process_group: None) -> None:
    # process_group: the sharded scaler agrees on overflows over the ranks (an all-reduce);
    # without this fixture the test passed only where an earlier test had left a group.
    scaler = LossScaler.for_precision("fp16", torch.device("cpu"), sharded=sharded)
    assert scaler.enabled
    # A step whose gradients overflowed (here: infinite) is skipped and the scale halved.
    layer, before = one_step(scaler, math.inf)
    assert torch.equal(layer.weight, before)
    assert scaler.state_dict()["scale"] == 2.0**15
    # At the lower scale the same small loss is unscaled before the step: SGD moves by 0.2.
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    optimizer.zero_grad()
    scaler.backward(layer(torch.ones(2, 3)).sum())
    scaler.step(optimizer)
    assert torch.allclose(layer.weight, before - 0.2)


def test_fp16_scale_survives_a_checkpoint() -> None:
    scaler = LossScaler.for_precision("fp16", torch.device("cpu"), sharded=False)
    one_step(scaler, math.inf)
    restored = LossScaler.for_precision("fp16", torch.device("cpu"), sharded=False)
    restored.load_state_dict(scaler.state_dict())
    assert restored.state_dict()["scale"] == 2.0**15
    # A checkpoint written without fp16 leaves the initial scale.
    fresh = LossScaler.for_precision("fp16", torch.device("cpu"), sharded=False)
    fresh.load_state_dict({})
    assert fresh.state_dict()["scale"] == 2.0**16
