"""GlobalBatchNorm: BatchNorm's result with one process, the global batch's with several.

Tolerances, measured (2026-11-26, 2-core AMD EPYC, torch's AVX2 kernels and again under
ATEN_CPU_CAPABILITY=default, which stands for another CPU): outputs differ by at most 4.8e-7,
one float32 rounding step at their size (up to 8): 1.1% of OUTPUTS. Gradients differ by at
most 2.7e-5 at sizes up to 115; the convolution's bias gradient, zero in exact arithmetic
(BatchNorm subtracts any constant), comes out as the rounding noise of sums of terms up to
about 100: 1.4e-6 to 5.3e-6, which used half of the former absolute part (1e-5). With
GRADIENTS' 1e-4 they use at most 9.5% of it; per-rank statistics, what the tests rule out,
change outputs by 0.9 and gradients by 1e-1 to 1e2.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ddpimg.train.batchnorm import GlobalBatchNorm, convert_batchnorm
from tests.train.ranks import run_ranks

OUTPUTS = {"rtol": 1e-5, "atol": 1e-5}
GRADIENTS = {"rtol": 1e-4, "atol": 1e-4}


def batch() -> torch.Tensor:
    return torch.randn(8, 3, 5, 5, generator=torch.Generator().manual_seed(0)) * 3 + 1


def model(converted: bool) -> nn.Module:
    torch.manual_seed(0)
    layers = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten())
    with torch.no_grad():
        layers[1].weight.uniform_(0.5, 1.5)
        layers[1].bias.uniform_(-0.5, 0.5)
    return convert_batchnorm(layers) if converted else layers


def test_one_process_matches_batchnorm() -> None:
    plain, converted = model(False), model(True)
    assert isinstance(converted[1], GlobalBatchNorm)
    inputs = batch()
    outputs = [m(inputs) for m in (plain, converted)]
    torch.testing.assert_close(outputs[0], outputs[1], **OUTPUTS)
    for output in outputs:
        output.square().sum().backward()
    for (name, p), q in zip(plain.named_parameters(), converted.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, **GRADIENTS, msg=name)
    for buffer in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(plain[1], buffer), getattr(converted[1], buffer))
    plain.eval()
    converted.eval()
    torch.testing.assert_close(plain(inputs), converted(inputs), **OUTPUTS)


def test_conversion_keeps_the_parameters_and_buffers() -> None:
    plain = model(False)
    converted = convert_batchnorm(plain)
    assert converted[1].weight is plain[1].weight
    assert converted[1].running_var is plain[1].running_var


def half_batch_on_rank(rank: int, out: str) -> None:
    """One of two ranks: its half of the batch through GlobalBatchNorm, the output and the
    gradients saved."""
    layers = model(True)
    output = layers(batch()[4 * rank : 4 * rank + 4])
    output.square().sum().backward()
    grads = {name: p.grad for name, p in layers.named_parameters()}
    torch.save(
        {"output": output.detach(), "grads": grads, "var": layers[1].running_var},
        Path(out) / f"{rank}.pt",
    )


def test_two_ranks_normalise_with_the_global_batchs_statistics(tmp_path: Path) -> None:
    run_ranks(half_batch_on_rank, 2, str(tmp_path))
    whole = model(True)
    output = whole(batch())
    output.square().sum().backward()
    halves = [torch.load(tmp_path / f"{rank}.pt", weights_only=True) for rank in range(2)]
    torch.testing.assert_close(torch.cat([h["output"] for h in halves]), output.detach())
    torch.testing.assert_close(halves[0]["var"], whole[1].running_var)
    for name, p in whole.named_parameters():
        # The whole batch's loss is the sum of the halves' losses: its gradient is the sum
        # of the ranks' gradients (what DDP's all-reduce adds up before averaging).
        total = halves[0]["grads"][name] + halves[1]["grads"][name]
        torch.testing.assert_close(total, p.grad, **GRADIENTS, msg=name)
    plain = model(False)
    per_rank = plain(batch()[:4])
    assert not torch.allclose(per_rank, output[:4].detach(), atol=1e-3)
