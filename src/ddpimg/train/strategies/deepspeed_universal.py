"""A DeepSpeed checkpoint in a form that no world size is written into: ddpimg's universal
checkpoint, made from DeepSpeed's own files when a run continues on another number of ranks.

DeepSpeed's ZeRO checkpoints hold, for every rank, its partition of the float32 master
weights and of the optimizer state, laid out for the world size that wrote them, and
DeepSpeed 0.19.8 refuses them on another (``ZeRORuntimeException``: "Automatic adjustment
of ZeRO's optimizer state partitioning with a new world size is not currently supported").
Its own universal checkpoints (``ds_to_universal``, ``checkpoint.load_universal``) cover
this, but the converter reads only Adam's state (``exp_avg``, ``exp_avg_sq``), ZeRO-3's
loader too, neither restores the module's buffers (BatchNorm's statistics), and both unpickle
every file with ``weights_only=False``.

So ddpimg converts by itself, for any torch optimizer: each rank's files are read with
``load_tensors`` (the safe-loading rule), the fragments of every parameter are put back
together in rank order (ZeRO-1/2: the ``param_slice_mappings`` DeepSpeed saves with each
partition; ZeRO-3: each parameter split into ``ceil(numel / world)`` elements a rank, in the
order of ``param_shapes``), and the result is written beside the checkpoint as plain data:

    universal/universal.json          format, source world size, stage, parameters and
                                      their shapes, the optimizer's per-group values, the
                                      engine's counters, the loss scale
    universal/fp32.safetensors        each parameter's float32 master weights
    universal/state.KEY.safetensors   each parameter's optimizer state KEY (exp_avg, ...)
    universal/scalars.safetensors     per-group tensors that are not per element (step)
    universal/buffers.safetensors     the module's buffers

safetensors files hold tensors and a JSON header only: reading them runs no code. The
conversion is made once per checkpoint (rank 0, atomically) and read by every rank;
``ddpimg.train.strategies.deepspeed`` loads it into an engine of any world size.
ZeRO-0 checkpoints need none of this: their model states hold every weight and the whole
optimizer state, which DeepSpeed loads on any world size.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpimg.errors import DdpimgError
from ddpimg.train.checkpoint.safeload import load_tensors

if TYPE_CHECKING:
    import torch

UNIVERSAL = "universal"
FORMAT = 1
MANIFEST = "universal.json"
FP32 = "fp32.safetensors"
SCALARS = "scalars.safetensors"
BUFFERS = "buffers.safetensors"
STATE_PREFIX = "state."
# DeepSpeed's names in a tag folder: the model states (one file; one a rank with ZeRO-3,
# whose module is partitioned) and each rank's optimizer partition.
MODEL_STATES = "mp_rank_00_model_states.pt"
ZERO3_MODEL_STATES = "zero_pp_rank_{rank}_mp_rank_00_model_states.pt"
# bf16_ before it when the run was bf16.
OPTIM_STATES = "zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"
# A handed checkpoint says how many ranks wrote it: a bound before anything is opened.
MAX_WORLD_SIZE = 1 << 16
# universal.json is ddpimg's own small file: names, shapes and a few numbers.
MAX_MANIFEST_BYTES = 64 << 20
# The engine's own step counters, which its native load restores too.
COUNTERS = ("global_steps", "global_samples", "skipped_steps")
# The dynamic loss scaler's state (fp16) that is kept: plain numbers, set again by name.
LOSS_SCALE = ("cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis")
_STATE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# The per-group values of a torch optimizer that are plain JSON (lr, betas, eps, ...).
_PLAIN = (bool, int, float, str, type(None))

HINT = (
    "the checkpoint was written by another DeepSpeed or ddpimg version, or damaged; resume "
    "on the world size that wrote it, from another checkpoint (--resume PATH), or start over "
    "(--resume none)"
)


UNSUPPORTED_HINT = (
    "resume it on the world size that wrote it, or start over (--resume none); ddpimg "
    "reshards data-parallel ZeRO-1/2/3 checkpoints of trained parameters only"
)


def bad(path: Path, what: str, hint: str = HINT) -> DdpimgError:
    """The error of a DeepSpeed checkpoint (or its universal form) that cannot be used."""
    return DdpimgError(f"DeepSpeed checkpoint {path}: {what}", hint=hint)


@dataclass(frozen=True)
class GroupState:
    """One optimizer param group: its hyper-parameters (``lr``, ``betas``, ...) and the
    values of its state that are not per element (``step``: tensors; others: plain)."""

    hyper: dict[str, Any]
    scalars: dict[str, torch.Tensor]
    plain: dict[str, Any]


@dataclass(frozen=True)
class Universal:
    """A DeepSpeed run's state with no world size in it. ``fp32`` and each of ``state``'s
    maps hold every parameter, by name, in its full shape; ``groups`` follow the optimizer's
    param groups in order; ``counters`` are the engine's (global_steps, global_samples,
    skipped_steps); ``loss_scale`` the fp16 dynamic scaler's values (empty without fp16).
    Read back (``read``), ``fp32`` and ``state`` load each tensor when it is asked for: a
    rank holds one parameter's full tensor at a time, not the whole model's."""

    source_world_size: int
    stage: int
    shapes: dict[str, tuple[int, ...]]
    fp32: Mapping[str, torch.Tensor]
    state: Mapping[str, Mapping[str, torch.Tensor]]
    groups: list[GroupState]
    buffers: dict[str, torch.Tensor]
    counters: dict[str, int]
    loss_scale: dict[str, Any]


# ---- From DeepSpeed's files -----------------------------------------------------------------


def convert(tag: Path) -> Universal:
    """Read the ZeRO-1/2/3 checkpoint in the tag folder ``tag`` (every rank's files) into a
    ``Universal``. Raises a DdpimgError naming the file and what is wrong."""
    from ddpimg.train.strategies.deepspeed_files import checkpoint_globals

    allowed = checkpoint_globals()
    states = _model_states(tag, allowed)
    world = _world_size(tag, states)
    stage = _stage(tag, states)
    shapes = _param_shapes(tag, states)
    if states.get("frozen_param_shapes"):
        raise bad(tag, "it has frozen parameters, which ddpimg does not reshard", UNSUPPORTED_HINT)
    prefix = "bf16_" if _bf16(states) else ""
    partitions = [
        _optimizer_states(tag / (prefix + OPTIM_STATES.format(rank=rank)), allowed)
        for rank in range(world)
    ]
    if stage == 3:
        fp32, state = _merge_zero3(tag, shapes, partitions, world)
    else:
        fp32, state = _merge_zero12(tag, shapes, partitions)
    return Universal(
        source_world_size=world,
        stage=stage,
        shapes=shapes,
        fp32=fp32,
        state=state,
        groups=_groups(partitions[0], stage),
        buffers=_buffers(tag, states),
        counters={key: _count(tag, states, key) for key in COUNTERS},
        loss_scale=_loss_scale(partitions[0].state),
    )


def _is_tensor(value: object) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _model_states(tag: Path, allowed: Sequence[type]) -> dict[str, Any]:
    """The model states file (rank 0's with ZeRO-3)."""
    for name in (MODEL_STATES, ZERO3_MODEL_STATES.format(rank=0)):
        path = tag / name
        if path.is_file():
            loaded = load_tensors(path, "cpu", allowed)
            if not isinstance(loaded, dict):
                raise bad(path, f"it holds a {type(loaded).__name__}, not DeepSpeed's model states")
            return loaded
    raise bad(tag, f"it has neither {MODEL_STATES} nor {ZERO3_MODEL_STATES.format(rank=0)}")


def _bf16(states: Mapping[str, Any]) -> bool:
    """Whether the run was bf16 (DeepSpeed then names each rank's partition bf16_...)."""
    config = states.get("ds_config")
    bf16 = config.get("bf16") if isinstance(config, Mapping) else None
    return isinstance(bf16, Mapping) and bf16.get("enabled") is True


def _buffers(tag: Path, states: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The module's buffers (BatchNorm's statistics), which DeepSpeed keeps whole in the
    module state of every stage, under the names its ``buffer_names`` lists."""
    module, names = states.get("module"), states.get("buffer_names")
    if not isinstance(module, Mapping) or not isinstance(names, list):
        raise bad(tag, "its model states have no module state dict or no buffer_names")
    buffers = {}
    for name in names:
        value = module.get(name) if isinstance(name, str) else None
        if value is None or not _is_tensor(value):
            raise bad(tag, f"its buffer {name!r} is not in its module state")
        buffers[name] = value.contiguous()
    return buffers


def _world_size(tag: Path, states: Mapping[str, Any]) -> int:
    world = states.get("dp_world_size")
    if type(world) is not int or not 1 <= world <= MAX_WORLD_SIZE:
        raise bad(tag, f"its model states give dp_world_size={world!r}")
    if states.get("mp_world_size", 1) != 1:
        raise bad(
            tag,
            "it was written with model parallelism, which ddpimg does not reshard",
            UNSUPPORTED_HINT,
        )
    return world


def _stage(tag: Path, states: Mapping[str, Any]) -> int:
    config = states.get("ds_config")
    zero = config.get("zero_optimization") if isinstance(config, Mapping) else None
    stage = zero.get("stage") if isinstance(zero, Mapping) else None
    if stage not in (1, 2, 3):
        raise bad(tag, f"its model states give ZeRO stage {stage!r}, not 1, 2 or 3")
    return int(stage)


def _param_shapes(tag: Path, states: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every trained parameter's shape, in DeepSpeed's order (its param groups, in turn)."""
    groups = states.get("param_shapes")
    if not isinstance(groups, list):
        raise bad(tag, "its model states have no param_shapes list")
    shapes: dict[str, tuple[int, ...]] = {}
    for group in groups:
        if not isinstance(group, Mapping):
            raise bad(tag, "a param_shapes entry is not a mapping")
        for name, shape in group.items():
            dims = tuple(shape) if isinstance(shape, (list, tuple)) else None
            if (
                not isinstance(name, str)
                or dims is None
                or not all(type(d) is int and d >= 0 for d in dims)
            ):
                raise bad(tag, f"param_shapes has {name!r}: {shape!r}")
            shapes[name] = dims
    return shapes


@dataclass(frozen=True)
class _Partition:
    """One rank's optimizer file and the state DeepSpeed saved in it."""

    path: Path
    state: dict[str, Any]


def _optimizer_states(path: Path, allowed: Sequence[type]) -> _Partition:
    if not path.is_file():
        raise bad(path.parent, f"{path.name} is missing")
    loaded = load_tensors(path, "cpu", allowed)
    state = loaded.get("optimizer_state_dict") if isinstance(loaded, dict) else None
    if not isinstance(state, dict):
        raise bad(path, "it holds no optimizer_state_dict")
    return _Partition(path, state)


def _base_state(path: Path, partition: Mapping[str, Any], stage: int) -> dict[str, Any]:
    """The torch optimizer's own state_dict inside a rank's partition."""
    key = "optimizer_state_dict" if stage == 3 else "base_optimizer_state"
    base = partition.get(key)
    if not isinstance(base, dict) or not isinstance(base.get("state"), dict):
        raise bad(path, f"its {key} is not a torch optimizer state (an elastic checkpoint?)")
    groups = base.get("param_groups")
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise bad(path, f"its {key} has no param_groups list")
    return base


def _flat_fp32(path: Path, partition: Mapping[str, Any], stage: int) -> list[torch.Tensor]:
    key = "fp32_flat_groups" if stage == 3 else "single_partition_of_fp32_groups"
    flats = partition.get(key)
    if not isinstance(flats, list) or not all(_is_tensor(f) and f.dim() == 1 for f in flats):
        raise bad(path, f"its {key} is not a list of flat tensors")
    return flats


def _element_keys(path: Path, base: Mapping[str, Any], flats: Sequence[torch.Tensor]) -> list[str]:
    """The state keys that hold a value per element (a flat tensor as long as the group's
    partition, or longer by DeepSpeed's padding), checked alike in every group."""
    keys: set[str] | None = None
    for index, flat in enumerate(flats):
        entry = base["state"].get(index, {})
        found = {
            key
            for key, value in entry.items()
            if _is_tensor(value) and value.dim() == 1 and value.numel() >= flat.numel() > 0
        }
        if keys is not None and found != keys:
            raise bad(path, f"its optimizer state has other keys in group {index}")
        keys = found
    for key in keys or ():
        if not _STATE_KEY.fullmatch(key):
            raise bad(path, f"its optimizer state has a key {key!r} ddpimg cannot name a file by")
    return sorted(keys or ())


def _merge_zero12(
    tag: Path, shapes: Mapping[str, tuple[int, ...]], partitions: Sequence[_Partition]
) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, torch.Tensor]]]:
    """ZeRO-1/2: each rank's flat partition of a param group holds fragments of some of its
    parameters, at the (start, numel) its ``param_slice_mappings`` give; a parameter is its
    fragments in rank order."""
    pieces: dict[str, list[torch.Tensor]] = {}
    state_pieces: dict[str, dict[str, list[torch.Tensor]]] = {}
    keys: list[str] | None = None
    for partition in partitions:
        path = partition.path
        base = _base_state(path, partition.state, 2)
        flats = _flat_fp32(path, partition.state, 2)
        mappings = partition.state.get("param_slice_mappings")
        if not isinstance(mappings, list) or len(mappings) != len(flats):
            raise bad(path, "its param_slice_mappings do not match its groups")
        found = _element_keys(path, base, flats)
        if keys is not None and found != keys:
            raise bad(path, f"its optimizer state keys {found} differ from rank 0's {keys}")
        keys = found
        for index, (flat, mapping) in enumerate(zip(flats, mappings, strict=True)):
            entry = base["state"].get(index, {})
            for name, address in _fragments(path, mapping, flat.numel()):
                start, numel = address
                pieces.setdefault(name, []).append(flat.narrow(0, start, numel))
                for key in keys:
                    values = entry[key]
                    state_pieces.setdefault(key, {}).setdefault(name, []).append(
                        values.narrow(0, start, numel)
                    )
    fp32 = _assembled(tag, shapes, pieces)
    state = {key: _assembled(tag, shapes, state_pieces.get(key, {})) for key in keys or ()}
    return fp32, state


def _fragments(path: Path, mapping: Any, limit: int) -> Iterator[tuple[str, tuple[int, int]]]:
    """(name, (start, numel)) of each fragment in a flat partition of ``limit`` elements."""
    if not isinstance(mapping, Mapping):
        raise bad(path, "a param_slice_mappings entry is not a mapping")
    for name, address in mapping.items():
        start, numel = getattr(address, "start", None), getattr(address, "numel", None)
        if (
            not isinstance(name, str)
            or type(start) is not int
            or type(numel) is not int
            or not (start >= 0 and numel > 0 and start + numel <= limit)
        ):
            raise bad(path, f"its fragment of {name!r} lies outside its partition ({address!r})")
        yield name, (start, numel)


def _merge_zero3(
    tag: Path,
    shapes: Mapping[str, tuple[int, ...]],
    partitions: Sequence[_Partition],
    world: int,
) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, torch.Tensor]]]:
    """ZeRO-3: every rank holds ``ceil(numel / world)`` elements of every parameter (the
    last ones padded), one after the other in ``param_shapes`` order across its groups."""
    import torch

    flats_by_rank: list[torch.Tensor] = []
    states_by_rank: list[dict[str, torch.Tensor]] = []
    keys: list[str] | None = None
    for partition in partitions:
        path = partition.path
        base = _base_state(path, partition.state, 3)
        flats = _flat_fp32(path, partition.state, 3)
        found = _element_keys(path, base, flats)
        if keys is not None and found != keys:
            raise bad(path, f"its optimizer state keys {found} differ from rank 0's {keys}")
        keys = found
        flats_by_rank.append(torch.cat(flats))
        states_by_rank.append(
            {
                key: torch.cat(
                    [base["state"][i][key].narrow(0, 0, f.numel()) for i, f in enumerate(flats)]
                )
                for key in keys
            }
        )
    needed = sum(-(-math.prod(shape) // world) for shape in shapes.values())
    for partition, flat in zip(partitions, flats_by_rank, strict=True):
        if flat.numel() < needed:
            raise bad(
                partition.path,
                f"its partition holds {flat.numel()} elements, its parameters need {needed}",
            )

    def merged(per_rank: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        full: dict[str, torch.Tensor] = {}
        offset = 0
        for name, shape in shapes.items():
            numel = math.prod(shape)
            share = -(-numel // world)
            parts = [flat.narrow(0, offset, share) for flat in per_rank]
            full[name] = torch.cat(parts).narrow(0, 0, numel).reshape(shape).clone()
            offset += share
        return full

    fp32 = merged(flats_by_rank)
    state = {key: merged([s[key] for s in states_by_rank]) for key in keys or ()}
    return fp32, state


def _assembled(
    tag: Path, shapes: Mapping[str, tuple[int, ...]], pieces: Mapping[str, list[torch.Tensor]]
) -> dict[str, torch.Tensor]:
    import torch

    full: dict[str, torch.Tensor] = {}
    for name, shape in shapes.items():
        parts = pieces.get(name)
        numel = math.prod(shape)
        got = sum(part.numel() for part in parts) if parts else 0
        if got != numel:
            raise bad(tag, f"its partitions hold {got} elements of {name}, of shape {list(shape)}")
        full[name] = torch.cat(parts or []).reshape(shape).clone()
    unknown = sorted(set(pieces) - set(shapes))
    if unknown:
        raise bad(tag, f"its partitions hold parameters it has no shape for: {unknown[:3]}")
    return full


def _groups(partition: _Partition, stage: int) -> list[GroupState]:
    """Rank 0's param groups: hyper-parameters and the values that are not per element
    (equal on every rank: DeepSpeed steps every partition alike)."""
    path = partition.path
    base = _base_state(path, partition.state, stage)
    flats = _flat_fp32(path, partition.state, stage)
    element = set(_element_keys(path, base, flats))
    groups = []
    for group in base["param_groups"]:
        indices = group.get("params")
        if not isinstance(indices, list) or not indices:
            raise bad(path, "a param group lists no parameters")
        entry = base["state"].get(indices[0], {})
        scalars = {k: v for k, v in entry.items() if k not in element and _is_tensor(v)}
        plain = {k: v for k, v in entry.items() if k not in element and not _is_tensor(v)}
        if any(not isinstance(value, _PLAIN) for value in plain.values()):
            raise bad(path, f"its optimizer state holds values ddpimg cannot carry: {plain}")
        hyper = {k: _plain(path, k, v) for k, v in group.items() if k != "params"}
        groups.append(GroupState(hyper, scalars, plain))
    return groups


def _plain(path: Path, key: str, value: Any) -> Any:
    """A hyper-parameter as a JSON value (a tuple such as Adam's betas as a list)."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, _PLAIN) for v in value):
        return list(value)
    raise bad(path, f"its param group's {key} is a {type(value).__name__}, not a plain value")


def _count(tag: Path, states: Mapping[str, Any], key: str) -> int:
    value = states.get(key, 0)
    if type(value) is not int or value < 0:
        raise bad(tag, f"its model states give {key}={value!r}")
    return value


def _loss_scale(partition: Mapping[str, Any]) -> dict[str, Any]:
    """The dynamic loss scaler's state (fp16), as plain values; empty for a static one."""
    scaler = partition.get("loss_scaler")
    if not partition.get("dynamic_loss_scale") or scaler is None:
        return {}
    values = {name: getattr(scaler, name) for name in LOSS_SCALE if hasattr(scaler, name)}
    return {name: value for name, value in values.items() if _is_number(value)}


# ---- On disk --------------------------------------------------------------------------------


def write(universal: Universal, directory: Path) -> None:
    """Write ``universal`` to ``directory`` (which must not exist): assembled under a
    temporary name beside it and renamed, so that a directory of that name is complete."""
    from safetensors.torch import save_file

    staging = directory.with_name(f".{directory.name}.{secrets.token_hex(4)}.tmp")
    staging.mkdir()
    try:
        save_file(dict(universal.fp32), str(staging / FP32))
        for key, values in universal.state.items():
            save_file(dict(values), str(staging / f"{STATE_PREFIX}{key}.safetensors"))
        scalars = {
            f"{index}/{key}": value.reshape(1)
            for index, group in enumerate(universal.groups)
            for key, value in group.scalars.items()
        }
        save_file(scalars, str(staging / SCALARS))
        save_file(universal.buffers, str(staging / BUFFERS))
        manifest = {
            "format": FORMAT,
            "source_world_size": universal.source_world_size,
            "stage": universal.stage,
            "shapes": {name: list(shape) for name, shape in universal.shapes.items()},
            "state_keys": sorted(universal.state),
            "groups": [
                {"hyper": group.hyper, "plain": group.plain, "scalars": sorted(group.scalars)}
                for group in universal.groups
            ],
            "buffers": sorted(universal.buffers),
            "counters": universal.counters,
            "loss_scale": universal.loss_scale,
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        os.replace(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def read(directory: Path) -> Universal:
    """The ``Universal`` that ``write`` wrote to ``directory``, checked before use (every
    file's names, and the per-parameter tensors' shapes and dtype from their headers): a
    DdpimgError names the file and what is wrong."""
    manifest = _manifest(directory)
    shapes = {name: tuple(shape) for name, shape in manifest["shapes"].items()}
    fp32 = _LazyTensors(directory / FP32, shapes)
    state = {
        key: _LazyTensors(directory / f"{STATE_PREFIX}{key}.safetensors", shapes)
        for key in manifest["state_keys"]
    }
    names = {f"{i}/{key}" for i, group in enumerate(manifest["groups"]) for key in group["scalars"]}
    scalars = _tensors(directory / SCALARS, names)
    not_scalar = sorted(name for name, value in scalars.items() if value.numel() != 1)
    if not_scalar:
        raise bad(directory, f"{SCALARS}: {not_scalar[:3]} are not single values")
    groups = [
        GroupState(
            group["hyper"],
            {key: scalars[f"{i}/{key}"].reshape(()) for key in group["scalars"]},
            group["plain"],
        )
        for i, group in enumerate(manifest["groups"])
    ]
    return Universal(
        source_world_size=manifest["source_world_size"],
        stage=manifest["stage"],
        shapes=shapes,
        fp32=fp32,
        state=state,
        groups=groups,
        buffers=_tensors(directory / BUFFERS, set(manifest["buffers"])),
        counters=manifest["counters"],
        loss_scale=manifest["loss_scale"],
    )


class _LazyTensors(Mapping[str, "torch.Tensor"]):
    """A safetensors file of one float32 tensor per parameter, checked against ``shapes``
    from its header when made; each tensor is read when it is asked for."""

    def __init__(self, path: Path, shapes: Mapping[str, tuple[int, ...]]) -> None:
        self.path = path
        with _opened(path) as handle:
            names = set(handle.keys())
            _same_names(path, names, set(shapes))
            for name, shape in shapes.items():
                piece = handle.get_slice(name)
                found = (tuple(piece.get_shape()), piece.get_dtype())
                if found != (shape, "F32"):
                    raise bad(
                        path.parent,
                        f"{path.name}: {name} is {found[1]} of shape {list(found[0])}, not "
                        f"F32 of shape {list(shape)}",
                    )
        self._names = sorted(shapes)

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._names:
            raise KeyError(name)
        with _opened(self.path) as handle:
            tensor: torch.Tensor = handle.get_tensor(name)
        return tensor

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[Any]:
    """safetensors' ``safe_open`` of ``path``; a file that is not one is a DdpimgError."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise bad(path.parent, f"{path.name} is missing or not a file")
    try:
        with safe_open(str(path), framework="pt") as handle:
            yield handle
    except (SafetensorError, OSError, ValueError) as err:
        raise bad(path.parent, f"{path.name} is not a safetensors file ({err})") from err


def _same_names(path: Path, found: set[str], expected: set[str]) -> None:
    if found != expected:
        missing, extra = sorted(expected - found), sorted(found - expected)
        raise bad(path.parent, f"{path.name} lacks {missing[:3]} or holds {extra[:3]}")


def _manifest(directory: Path) -> dict[str, Any]:
    from ddpimg.untrusted import read_json

    try:
        manifest = read_json(directory / MANIFEST, MAX_MANIFEST_BYTES)
    except (OSError, ValueError) as err:
        raise bad(directory, f"{MANIFEST} cannot be read ({err})") from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise bad(directory, f"{MANIFEST} is not a format-{FORMAT} universal checkpoint")
    checks: dict[str, Callable[[Any], bool]] = {
        "source_world_size": lambda v: type(v) is int and 1 <= v <= MAX_WORLD_SIZE,
        "stage": lambda v: v in (1, 2, 3),
        "shapes": lambda v: isinstance(v, dict) and all(map(_is_shape, v.values())),
        "state_keys": lambda v: _is_list_of_str(v) and all(map(_STATE_KEY.fullmatch, v)),
        "groups": lambda v: isinstance(v, list) and all(map(_is_group, v)),
        "buffers": _is_list_of_str,
        # Set on the engine and its loss scaler by name: only the names ddpimg writes.
        "counters": lambda v: (
            isinstance(v, dict) and set(v) == set(COUNTERS) and all(map(_is_count, v.values()))
        ),
        "loss_scale": lambda v: (
            isinstance(v, dict) and set(v) <= set(LOSS_SCALE) and all(map(_is_number, v.values()))
        ),
    }
    for key, valid in checks.items():
        if not valid(manifest.get(key)):
            raise bad(directory, f"{MANIFEST} has an invalid {key!r}")
    return manifest


def _is_shape(value: Any) -> bool:
    return isinstance(value, list) and all(type(d) is int and d >= 0 for d in value)


def _is_list_of_str(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _is_number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _is_hyper(value: Any) -> bool:
    """A hyper-parameter as torch's optimizers hold them: a number, a flag, None, or a list
    of numbers (``betas``)."""
    if value is None or type(value) is bool or _is_number(value):
        return True
    return isinstance(value, list) and len(value) <= 8 and all(map(_is_number, value))


def _is_group(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("hyper"), dict)
        and all(map(_is_hyper, value["hyper"].values()))
        and isinstance(value.get("plain"), dict)
        and _is_list_of_str(value.get("scalars"))
    )


def _tensors(path: Path, names: set[str]) -> dict[str, torch.Tensor]:
    """The tensors of the small safetensors file ``path`` (scalars, buffers), which must hold
    exactly ``names``."""
    with _opened(path) as handle:
        _same_names(path, set(handle.keys()), names)
        return {name: handle.get_tensor(name) for name in names}


def make_universal(engine_checkpoint: Path, tag: str) -> None:
    """Convert the DeepSpeed checkpoint in the strategy's folder ``engine_checkpoint`` (its
    tag folder ``tag``) into ``universal/`` beside it, unless a complete one is there: it is
    kept, and a later resume on any other world size reads it again (rank 0 alone)."""
    target = engine_checkpoint / UNIVERSAL
    if (target / MANIFEST).is_file():
        return
    try:
        write(convert(engine_checkpoint / tag), target)
    except OSError as err:
        raise DdpimgError(
            f"DeepSpeed checkpoint {engine_checkpoint}: cannot write its universal form "
            f"({err.strerror}: {err.filename})",
            hint="resume from a copy of the checkpoint in a writable place (--resume PATH), "
            "or on the world size that wrote it",
        ) from err
    except (AttributeError, KeyError, IndexError, TypeError, ValueError, RuntimeError) as err:
        # The structure checks name what they know; anything else in files that passed them
        # (an entry of the wrong type deep inside) is still the checkpoint's, not ddpimg's.
        what = f"{type(err).__name__}: {err}"[:200]
        raise bad(engine_checkpoint, f"it is not as DeepSpeed writes it ({what})") from err
