"""BatchNorm over the global batch with any backend: what keeps a BatchNorm model's loss the
same for any number of processes on the CPU, where torch's ``SyncBatchNorm`` refuses to run.

In training, every rank sums its slice's values and squares per channel (in float64, so
that the mean of squares minus the squared mean does not cancel away the variance); one
all-reduce of [count, sums, squares] gives the global batch's mean and variance, with which
each rank normalises its slice. The all-reduce is differentiable (``_SummedOverRanks``): in
backward it sums the gradients of the statistics over the ranks, so each rank's gradient is
that of the global batch's loss, as ``SyncBatchNorm``'s.
Running statistics are updated as torch updates them (momentum, unbiased variance).
Evaluation uses the running statistics and no collective.

With one process the result equals BatchNorm's up to rounding; a model converted once
behaves the same with any world size, which is what makes 1 and N processes comparable.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class _SummedOverRanks(torch.autograd.Function):
    """All-reduce (sum) whose backward all-reduces the gradient: d(sum)/d(part) is 1 for
    every rank's part, so each part's gradient is the sum of the ranks' gradients."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, tensor: torch.Tensor) -> torch.Tensor:
        total = tensor.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, gradient: torch.Tensor) -> torch.Tensor:
        total = gradient.clone()
        dist.all_reduce(total)
        return total


class GlobalBatchNorm(nn.modules.batchnorm._BatchNorm):
    """A drop-in for ``BatchNorm1d/2d/3d`` (inputs (N, C, ...)) whose training statistics
    are those of the whole global batch."""

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected an input of at least 2 dimensions, got {input.dim()}")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        if not self.training and self.track_running_stats:
            return F.batch_norm(
                input, self.running_mean, self.running_var, self.weight, self.bias,
                False, 0.0, self.eps,
            )  # fmt: skip
        channels = input.shape[1]
        dims = [0, *range(2, input.dim())]
        values = input.double()
        local = torch.cat(
            [
                values.new_full((1,), input.numel() / channels),
                values.sum(dims),
                (values * values).sum(dims),
            ]
        )
        several = dist.is_initialized() and dist.get_world_size() > 1
        reduced = _SummedOverRanks.apply(local) if several else local
        count = reduced[0]
        mean = reduced[1 : 1 + channels] / count
        variance = (reduced[1 + channels :] / count - mean * mean).clamp_min(0.0)
        if self.track_running_stats:
            self._update_running(mean.detach(), variance.detach(), float(count.item()))
        shape = [1, channels] + [1] * (input.dim() - 2)
        scale = torch.rsqrt(variance + self.eps).to(input.dtype)
        output = (input - mean.to(input.dtype).view(shape)) * scale.view(shape)
        if self.affine:
            output = output * self.weight.view(shape) + self.bias.view(shape)
        return output

    def _update_running(self, mean: torch.Tensor, variance: torch.Tensor, count: float) -> None:
        if self.running_mean is None or self.running_var is None:
            return
        if self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
        if self.momentum is not None:
            momentum = self.momentum
        else:  # a cumulative average, as torch's BatchNorm with momentum=None
            momentum = 1.0 / float(self.num_batches_tracked or 1)
        unbiased = variance * (count / max(count - 1.0, 1.0))
        running_mean, running_var = self.running_mean, self.running_var
        running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
        running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)


def convert_batchnorm(module: nn.Module) -> nn.Module:
    """``module`` with every BatchNorm layer replaced by a ``GlobalBatchNorm`` holding the
    same parameters and buffers (as ``SyncBatchNorm.convert_sync_batchnorm`` does)."""
    converted = module
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and not isinstance(
        module, GlobalBatchNorm
    ):
        converted = GlobalBatchNorm(
            module.num_features, module.eps, module.momentum, module.affine,
            module.track_running_stats,
        )  # fmt: skip
        if module.affine:
            with torch.no_grad():
                converted.weight = module.weight
                converted.bias = module.bias
        converted.running_mean = module.running_mean
        converted.running_var = module.running_var
        converted.num_batches_tracked = module.num_batches_tracked
        converted.training = module.training
    for name, child in module.named_children():
        converted.add_module(name, convert_batchnorm(child))
    return converted
