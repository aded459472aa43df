"""Loading ddpimg's universal form of a DeepSpeed checkpoint (``deepspeed_universal``) into
an engine of any world size: every rank takes its own partition of every tensor.

- The module's weights (bf16 or fp32, what the model computes with) are written in place:
  ZeRO-1/2 keep them whole on every rank; ZeRO-3 gathers each one with DeepSpeed's public
  ``deepspeed.zero.GatheredParameters`` and partitions rank 0's value again. Buffers too.
- The float32 master weights go where DeepSpeed keeps this rank's part of them: ZeRO-1/2
  through the public ``deepspeed.utils.safe_set_full_fp32_param``; ZeRO-3 through the view
  DeepSpeed's own method gives (``_zero3_writer`` says why not the public one).
- The optimizer state is the torch optimizer's own ``load_state_dict`` over the flat
  partitions DeepSpeed hands it (``engine.optimizer.optimizer``; ZeRO-3 hands them over only
  while it steps or loads: ``_flat_partitions``). Its per-element values are laid out as the
  master weights are, so each is written as if it were the weights and read back from the
  partitions; the weights are written last. (DeepSpeed's ``safe_set_full_optimizer_state``
  needs the state to exist, and a torch optimizer makes it at its first step.)
- The engine's step counters and an fp16 loss scale are set as DeepSpeed's own load sets
  them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ddpimg.train.strategies.deepspeed_universal import Universal, bad


def load_universal(engine: Any, universal: Universal, checkpoint: Path, rank: int) -> None:
    """Load ``universal`` (read from ``checkpoint``'s universal form) into ``engine``, a
    ``DeepSpeedEngine`` with ZeRO-1, 2 or 3, on every rank (collective with ZeRO-3)."""
    stage = engine.zero_optimization_stage()
    if stage != universal.stage:
        raise bad(checkpoint, f"it is a ZeRO-{universal.stage} checkpoint, this run ZeRO-{stage}")
    module = engine.module
    params = list(module.named_parameters())
    _check_parameters(checkpoint, params, universal, stage)
    _load_module(module, params, universal, checkpoint, stage=stage, rank=rank)
    base = engine.optimizer.optimizer
    if len(base.param_groups) != len(universal.groups):
        raise bad(
            checkpoint,
            f"its optimizer has {len(universal.groups)} param groups, this run's "
            f"{len(base.param_groups)}",
        )
    write = _zero3_writer(engine.optimizer, rank) if stage == 3 else _fragment_writer()
    with _flat_partitions(engine.optimizer) as flats:
        per_element = {
            key: _laid_out(params, values, flats, write) for key, values in universal.state.items()
        }
        # The master weights last: they stay where they belong.
        _laid_out(params, universal.fp32, flats, write)
        base.load_state_dict(_optimizer_state(base, universal, per_element))
    relink = getattr(engine.optimizer, "_link_all_hp_params", None)
    if relink is not None:
        # ZeRO-1/2 point each parameter at its fragments of the optimizer state, made when
        # the state was empty; DeepSpeed's own load ends the same way, so that its fragment
        # API (safe_get_full_optimizer_state) reads the state loaded here.
        relink()
    for counter, value in universal.counters.items():
        setattr(engine, counter, value)
    scaler = getattr(engine.optimizer, "loss_scaler", None)
    for name, value in universal.loss_scale.items():
        if scaler is not None and hasattr(scaler, name):
            setattr(scaler, name, value)


@contextlib.contextmanager
def _flat_partitions(optimizer: Any) -> Iterator[list[torch.Tensor]]:
    """This rank's flat float32 partitions, in the torch optimizer's param groups. ZeRO-1/2
    keep them there; ZeRO-3 puts each there only while it steps it, and all of them while
    its own ``load_state_dict`` runs, with the two methods used here."""
    zero3 = hasattr(optimizer, "_set_fp32_optimizer_param_groups")
    if zero3:
        optimizer._set_fp32_optimizer_param_groups()
    try:
        yield [flat for group in optimizer.optimizer.param_groups for flat in group["params"]]
    finally:
        if zero3:
            optimizer._clear_fp32_optimizer_param_groups()


def _shape(param: torch.nn.Parameter, stage: int) -> tuple[int, ...]:
    """A parameter's full shape (ZeRO-3 keeps only a partition in ``param``)."""
    # ds_shape: the full shape, which ZeRO-3 adds to each parameter it partitions.
    return tuple(getattr(param, "ds_shape", param.shape) if stage == 3 else param.shape)


def _check_parameters(
    checkpoint: Path,
    params: Sequence[tuple[str, torch.nn.Parameter]],
    universal: Universal,
    stage: int,
) -> None:
    names = [name for name, _ in params]
    missing, extra = (
        sorted(set(names) - set(universal.shapes)),
        sorted(set(universal.shapes) - set(names)),
    )
    if missing or extra:
        raise bad(
            checkpoint,
            f"its parameters differ from this model's (missing {missing[:3]}, unknown {extra[:3]})",
        )
    for name, param in params:
        if _shape(param, stage) != universal.shapes[name]:
            raise bad(
                checkpoint,
                f"{name} has shape {list(universal.shapes[name])} there, "
                f"{list(_shape(param, stage))} in this model",
            )


def _load_module(
    module: torch.nn.Module,
    params: Sequence[tuple[str, torch.nn.Parameter]],
    universal: Universal,
    checkpoint: Path,
    *,
    stage: int,
    rank: int,
) -> None:
    """The weights the model computes with (bf16 or fp32, cast from the master weights as
    DeepSpeed casts them after every step) and its buffers."""
    with torch.no_grad():
        for name, param in params:
            value = universal.fp32[name]
            if stage == 3:
                import deepspeed

                with deepspeed.zero.GatheredParameters([param], modifier_rank=0):
                    if rank == 0:
                        param.data.copy_(value.to(param.dtype))
            else:
                param.data.copy_(value.to(param.dtype))
        buffers = dict(module.named_buffers())
        persistent = {name for name in module.state_dict() if name in buffers}
        if persistent != set(universal.buffers):
            raise bad(
                checkpoint,
                f"its buffers {sorted(universal.buffers)[:3]} are not this model's "
                f"{sorted(persistent)[:3]}",
            )
        for name, value in universal.buffers.items():
            if value.shape != buffers[name].shape:
                raise bad(
                    checkpoint,
                    f"its buffer {name} has shape {list(value.shape)}, this model's "
                    f"{list(buffers[name].shape)}",
                )
            buffers[name].copy_(value)


Writer = Callable[[torch.nn.Parameter, torch.Tensor], None]


def _fragment_writer() -> Writer:
    """ZeRO-1/2: DeepSpeed's own ``safe_set_full_fp32_param``, which writes this rank's
    fragment of a parameter (if it has one) into its flat partition."""
    from deepspeed.utils import safe_set_full_fp32_param

    return safe_set_full_fp32_param  # type: ignore[no-any-return]


def _zero3_writer(optimizer: Any, rank: int) -> Writer:
    """ZeRO-3: this rank's ``ceil(numel / world)`` elements of a parameter, zero-padded,
    into the view of its partition that DeepSpeed's ``_get_fp32_opt_state_partition``
    gives. (DeepSpeed 0.19.8's ``safe_set_full_fp32_param`` cuts the same slice without the
    padding: on the last rank of a world that does not divide a parameter it fails with
    ``start + length exceeds dimension size``.)"""

    def write(param: torch.nn.Parameter, value: torch.Tensor) -> None:
        partition, _ = optimizer._get_fp32_opt_state_partition(param, release_swap_buffers=False)
        share = partition.numel()
        piece = value.flatten()[rank * share : (rank + 1) * share]
        partition.zero_()
        partition[: piece.numel()].copy_(piece)

    return write


def _laid_out(
    params: Sequence[tuple[str, torch.nn.Parameter]],
    full: Mapping[str, torch.Tensor],
    flats: Sequence[torch.Tensor],
    write: Writer,
) -> list[torch.Tensor]:
    """``full`` (a tensor per parameter) laid out as this rank's flat master-weight
    partitions are: written into them where DeepSpeed puts each parameter, and copied out."""
    with torch.no_grad():
        for flat in flats:
            flat.zero_()  # DeepSpeed's padding, which no parameter covers
        for name, param in params:
            write(param, full[name])
    return [flat.detach().clone() for flat in flats]


def _optimizer_state(
    base: torch.optim.Optimizer,
    universal: Universal,
    per_element: Mapping[str, Sequence[torch.Tensor]],
) -> dict[str, Any]:
    """The torch optimizer's state_dict for this rank: its flat partitions' state, and its
    param groups with the checkpoint's hyper-parameters (the learning rate the schedule
    reached, ...) over its own."""
    state: dict[int, dict[str, Any]] = {}
    groups = []
    index = 0
    for group, saved in zip(base.param_groups, universal.groups, strict=True):
        indices = []
        for _ in group["params"]:
            entry: dict[str, Any] = {key: values[index] for key, values in per_element.items()}
            entry |= {key: value.clone() for key, value in saved.scalars.items()}
            entry |= saved.plain
            state[index] = entry
            indices.append(index)
            index += 1
        merged = {key: value for key, value in group.items() if key != "params"}
        for key, value in saved.hyper.items():
            if key in merged:
                merged[key] = tuple(value) if isinstance(merged[key], tuple) else value
        groups.append(merged | {"params": indices})
    return {"state": state, "param_groups": groups}
