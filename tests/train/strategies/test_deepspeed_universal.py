"""ddpimg's universal form of a DeepSpeed checkpoint: put together from each rank's files as
DeepSpeed lays them out (ZeRO-1/2 fragments, ZeRO-3 padded partitions), written as
safetensors and JSON, and read back with every part checked. The files here are made by
hand in DeepSpeed's layout (the names and keys of DeepSpeed 0.19.8's own, seen in real
checkpoints); tests/integration/test_any_shape.py converts and continues real ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from deepspeed.runtime.zero.config import ZeroStageEnum
from deepspeed.utils.tensor_fragment import fragment_address

from ddpimg.errors import DdpimgError
from ddpimg.train.strategies import deepspeed_universal as du

# Two parameters: w (2x3, 6 elements) and b (5 elements), 11 in all.
W = torch.arange(6, dtype=torch.float32).reshape(2, 3)
B = torch.arange(100, 105, dtype=torch.float32)
SHAPES = [{"w": torch.Size([2, 3])}, {"b": torch.Size([5])}]


def model_states(stage: int, world: int, **changes: Any) -> dict[str, Any]:
    return {
        "module": {"w": W, "b": B, "norm.running_mean": torch.ones(3)},
        "buffer_names": ["norm.running_mean"],
        "param_shapes": SHAPES,
        "frozen_param_shapes": None,
        "dp_world_size": world,
        "mp_world_size": 1,
        "global_steps": 7,
        "global_samples": 112,
        "skipped_steps": 0,
        "ds_config": {"zero_optimization": {"stage": stage}, "bf16": {"enabled": False}},
    } | changes


def group(index: int, lr: float = 0.5) -> dict[str, Any]:
    return {"lr": lr, "betas": (0.9, 0.95), "weight_decay": 0.0, "params": [index]}


def zero2_partition(rank: int) -> dict[str, Any]:
    """Rank ``rank`` of two: group 0 (w, 6 elements) split 3 + 3, group 1 (b) 3 + 2, the
    last rank's partition padded by one."""
    w, b = W.flatten(), B
    flat_w = w[3 * rank : 3 * rank + 3]
    flat_b = b[3 * rank : 3 * rank + 3]
    padded_b = torch.cat([flat_b, torch.zeros(3 - len(flat_b))])
    state = {
        0: {"step": torch.tensor(7.0), "exp_avg": flat_w * 2},
        1: {"step": torch.tensor(7.0), "exp_avg": padded_b * 2},
    }
    return {
        "optimizer_state_dict": {
            "loss_scaler": None,
            "dynamic_loss_scale": False,
            "base_optimizer_state": {"state": state, "param_groups": [group(0), group(1)]},
            "single_partition_of_fp32_groups": [flat_w, flat_b],
            "zero_stage": ZeroStageEnum.gradients,
            "param_slice_mappings": [
                {"w": fragment_address(numel=3, start=0)},
                {"b": fragment_address(numel=len(flat_b), start=0)},
            ],
        }
    }


def zero3_partition(rank: int) -> dict[str, Any]:
    """Rank ``rank`` of two: each parameter in ceil(numel / 2) elements, padded: w 3 + 3,
    b 3 + 3 (the last one a zero)."""
    w = W.flatten()[3 * rank : 3 * rank + 3]
    b = torch.cat([B, torch.zeros(1)])[3 * rank : 3 * rank + 3]
    state = {
        0: {"step": torch.tensor(7.0), "exp_avg": w * 2},
        1: {"step": torch.tensor(7.0), "exp_avg": b * 2},
    }
    return {
        "optimizer_state_dict": {
            "zero_stage": ZeroStageEnum.weights,
            "loss_scaler": None,
            "dynamic_loss_scale": False,
            "optimizer_state_dict": {"state": state, "param_groups": [group(0), group(1)]},
            "fp32_flat_groups": [w, b],
        }
    }


def checkpoint(tmp_path: Path, stage: int, world: int = 2, **changes: Any) -> Path:
    tag = tmp_path / "deepspeed" / "engine"
    tag.mkdir(parents=True)
    if stage == 3:
        for rank in range(world):
            states = model_states(3, world, **changes)
            torch.save(states, tag / du.ZERO3_MODEL_STATES.format(rank=rank))
            torch.save(zero3_partition(rank), tag / du.OPTIM_STATES.format(rank=rank))
    else:
        torch.save(model_states(stage, world, **changes), tag / du.MODEL_STATES)
        for rank in range(world):
            torch.save(zero2_partition(rank), tag / du.OPTIM_STATES.format(rank=rank))
    return tag


@pytest.mark.parametrize("stage", [2, 3])
def test_the_fragments_of_every_rank_make_each_parameter(tmp_path: Path, stage: int) -> None:
    universal = du.convert(checkpoint(tmp_path, stage))
    assert (universal.source_world_size, universal.stage) == (2, stage)
    assert universal.shapes == {"w": (2, 3), "b": (5,)}
    torch.testing.assert_close(universal.fp32["w"], W)
    torch.testing.assert_close(universal.fp32["b"], B)
    assert sorted(universal.state) == ["exp_avg"]
    torch.testing.assert_close(universal.state["exp_avg"]["b"], B * 2)
    assert [g.scalars["step"].item() for g in universal.groups] == [7.0, 7.0]
    assert universal.groups[0].hyper == {"lr": 0.5, "betas": [0.9, 0.95], "weight_decay": 0.0}
    assert list(universal.buffers) == ["norm.running_mean"]
    assert universal.counters == {"global_steps": 7, "global_samples": 112, "skipped_steps": 0}


@pytest.mark.parametrize("stage", [2, 3])
def test_written_and_read_back_it_is_the_same(tmp_path: Path, stage: int) -> None:
    universal = du.convert(checkpoint(tmp_path, stage))
    du.write(universal, tmp_path / du.UNIVERSAL)
    back = du.read(tmp_path / du.UNIVERSAL)
    assert back.shapes == universal.shapes
    for name in universal.shapes:
        assert torch.equal(back.fp32[name], universal.fp32[name])
        assert torch.equal(back.state["exp_avg"][name], universal.state["exp_avg"][name])
    assert back.groups == universal.groups
    assert back.counters == universal.counters
    assert sorted(p.name for p in (tmp_path / du.UNIVERSAL).iterdir()) == [
        "buffers.safetensors",
        "fp32.safetensors",
        "scalars.safetensors",
        "state.exp_avg.safetensors",
        "universal.json",
    ]


def test_made_once_beside_the_checkpoint_and_reused(tmp_path: Path) -> None:
    engine = checkpoint(tmp_path, 2).parent
    du.make_universal(engine, "engine")
    manifest = engine / du.UNIVERSAL / du.MANIFEST
    made = manifest.stat().st_mtime_ns
    du.make_universal(engine, "engine")
    assert manifest.stat().st_mtime_ns == made
    assert [p.name for p in engine.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dp_world_size": 1 << 20}, r"its model states give dp_world_size=1048576"),
        ({"dp_world_size": "2"}, r"its model states give dp_world_size='2'"),
        ({"mp_world_size": 2}, r"it was written with model parallelism"),
        (
            {"ds_config": {"zero_optimization": {"stage": 0}}},
            r"its model states give ZeRO stage 0, not 1, 2 or 3",
        ),
        ({"param_shapes": [{"w": [2, -3]}]}, r"param_shapes has 'w': \[2, -3\]"),
        ({"buffer_names": ["gone"]}, r"its buffer 'gone' is not in its module state"),
        ({"global_steps": -1}, r"its model states give global_steps=-1"),
        ({"frozen_param_shapes": {"f": torch.Size([2])}}, r"it has frozen parameters"),
    ],
)
def test_model_states_that_cannot_be_used_are_named(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(DdpimgError, match=r"DeepSpeed checkpoint .*engine: " + message):
        du.convert(checkpoint(tmp_path, 2, **changes))


def test_a_missing_rank_is_named(tmp_path: Path) -> None:
    tag = checkpoint(tmp_path, 2)
    (tag / du.OPTIM_STATES.format(rank=1)).unlink()
    with pytest.raises(DdpimgError, match=r"zero_pp_rank_1_mp_rank_00_optim_states.pt is missing"):
        du.convert(tag)


def test_a_fragment_outside_its_partition_is_named(tmp_path: Path) -> None:
    tag = checkpoint(tmp_path, 2)
    partition = zero2_partition(0)
    mappings = partition["optimizer_state_dict"]["param_slice_mappings"]
    mappings[0]["w"] = fragment_address(numel=3, start=2)
    torch.save(partition, tag / du.OPTIM_STATES.format(rank=0))
    with pytest.raises(DdpimgError, match=r"its fragment of 'w' lies outside its partition"):
        du.convert(tag)


def test_fragments_that_do_not_add_up_are_named(tmp_path: Path) -> None:
    tag = checkpoint(tmp_path, 2)
    partition = zero2_partition(1)
    partition["optimizer_state_dict"]["param_slice_mappings"][0]["w"] = fragment_address(
        numel=2, start=0
    )
    torch.save(partition, tag / du.OPTIM_STATES.format(rank=1))
    with pytest.raises(
        DdpimgError, match=r"its partitions hold 5 elements of w, of shape \[2, 3\]"
    ):
        du.convert(tag)


def test_a_file_that_asks_for_code_is_refused_before_it_is_built(tmp_path: Path) -> None:
    tag = checkpoint(tmp_path, 2)
    torch.save(
        {"optimizer_state_dict": {"x": Path("planted")}}, tag / du.OPTIM_STATES.format(rank=1)
    )
    with pytest.raises(DdpimgError, match=r"not a checkpoint ddpimg can load safely"):
        du.convert(tag)


def test_an_entry_of_another_type_deep_inside_is_named(tmp_path: Path) -> None:
    """What the structure checks do not look at is still the checkpoint's error, not a
    traceback from inside the conversion."""
    tag = checkpoint(tmp_path, 2)
    partition = zero2_partition(0)
    partition["optimizer_state_dict"]["base_optimizer_state"]["param_groups"][0]["params"] = [[0]]
    torch.save(partition, tag / du.OPTIM_STATES.format(rank=0))
    with pytest.raises(
        DdpimgError, match=r"deepspeed: it is not as DeepSpeed writes it \(TypeError"
    ):
        du.make_universal(tag.parent, tag.name)


def test_a_state_key_that_cannot_name_a_file_is_refused(tmp_path: Path) -> None:
    tag = checkpoint(tmp_path, 2)
    for rank in range(2):
        partition = zero2_partition(rank)
        state = partition["optimizer_state_dict"]["base_optimizer_state"]["state"]
        for entry in state.values():
            entry["../up"] = entry.pop("exp_avg")
        torch.save(partition, tag / du.OPTIM_STATES.format(rank=rank))
    with pytest.raises(DdpimgError, match=r"a key '\.\./up' ddpimg cannot name a file by"):
        du.convert(tag)


def written(tmp_path: Path) -> Path:
    directory = tmp_path / du.UNIVERSAL
    du.write(du.convert(checkpoint(tmp_path, 2)), directory)
    return directory


def edit_manifest(directory: Path, **changes: Any) -> None:
    path = directory / du.MANIFEST
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"format": 2}, r"universal.json is not a format-1 universal checkpoint"),
        ({"stage": 0}, r"universal.json has an invalid 'stage'"),
        ({"state_keys": ["../../x"]}, r"universal.json has an invalid 'state_keys'"),
        (
            {"shapes": {"w": [2, 3], "b": [6]}},
            r"fp32.safetensors: b is F32 of shape \[5\], not F32 of shape \[6\]",
        ),
        ({"shapes": {"w": [2, 3]}}, r"fp32.safetensors lacks \[\] or holds \['b'\]"),
        ({"groups": [{"hyper": {}}]}, r"universal.json has an invalid 'groups'"),
        # Set by name on the engine and its loss scaler: only the names ddpimg writes.
        (
            {"counters": {"global_steps": 1, "global_samples": 2, "skipped_steps": 0, "x": 1}},
            r"universal.json has an invalid 'counters'",
        ),
        ({"loss_scale": {"__class__": 1}}, r"universal.json has an invalid 'loss_scale'"),
        ({"loss_scale": {"cur_scale": "big"}}, r"universal.json has an invalid 'loss_scale'"),
        (
            {"groups": [{"hyper": {"lr": "fast"}, "plain": {}, "scalars": []}]},
            r"universal.json has an invalid 'groups'",
        ),
    ],
)
def test_a_universal_form_that_does_not_fit_is_named(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    directory = written(tmp_path)
    edit_manifest(directory, **changes)
    with pytest.raises(DdpimgError, match=r"DeepSpeed checkpoint .*universal: " + message):
        du.read(directory)


def test_a_damaged_tensor_file_is_named(tmp_path: Path) -> None:
    directory = written(tmp_path)
    (directory / du.FP32).write_bytes(b"\xff" * 64)
    with pytest.raises(DdpimgError, match=r"fp32.safetensors is not a safetensors file"):
        du.read(directory)


def test_a_manifest_that_is_not_json_is_named(tmp_path: Path) -> None:
    directory = written(tmp_path)
    (directory / du.MANIFEST).write_text("[" * 100_000)
    with pytest.raises(DdpimgError, match=r"universal.json cannot be read"):
        du.read(directory)


def test_a_tensor_of_another_dtype_is_named_before_it_is_read(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    directory = written(tmp_path)
    save_file({"w": W.double(), "b": B}, str(directory / "state.exp_avg.safetensors"))
    with pytest.raises(DdpimgError, match=r"state.exp_avg.safetensors: w is F64 of shape \[2, 3\]"):
        du.read(directory)


def test_read_back_a_tensor_is_loaded_when_asked_for(tmp_path: Path) -> None:
    back = du.read(written(tmp_path))
    assert sorted(back.fp32) == ["b", "w"]
    assert torch.equal(back.fp32["w"], W)
    with pytest.raises(KeyError):
        back.fp32["absent"]
