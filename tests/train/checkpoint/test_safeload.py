"""Checkpoint files are read as data: a planted pickle is refused, naming the file, and
runs nothing; what torch and DCP really write loads as before."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ddpimg.errors import DdpimgError
from ddpimg.train.checkpoint import dcp
from ddpimg.train.checkpoint.safeload import REFUSED, load_tensors, read_dcp_metadata
from tests.train.checkpoint.planted import (
    Planted,
    plant_pickle,
    plant_torch_file,
    unrestricted_load_runs_code,
)


@pytest.mark.parametrize("torch_format", [True, False], ids=["torch-save", "pickle"])
def test_the_planted_files_run_code_when_loaded_without_restriction(
    tmp_path: Path, torch_format: bool
) -> None:
    assert unrestricted_load_runs_code(tmp_path, torch_format)


def test_a_torch_file_with_a_planted_object_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    path = tmp_path / "model.pt"
    plant_torch_file(path, marker)
    with pytest.raises(DdpimgError, match=REFUSED) as caught:
        load_tensors(path)
    assert str(path) in caught.value.message
    assert "it asks for io.open" in caught.value.message
    assert not marker.exists()


def test_tensors_and_plain_values_load(tmp_path: Path) -> None:
    path = tmp_path / "state.pt"
    state = {"w": torch.arange(6.0).view(2, 3), "lr": [0.1, (0.9, 0.99)], "name": "x", "n": 3}
    torch.save(state, path)
    loaded = load_tensors(path)
    assert torch.equal(loaded["w"], state["w"])
    assert (loaded["lr"], loaded["name"], loaded["n"]) == ([0.1, (0.9, 0.99)], "x", 3)


def save_dcp(directory: Path, state: dict[str, object]) -> None:
    dcp_save(state, storage_writer=FileSystemWriter(directory), no_dist=True)


def test_a_planted_dcp_metadata_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    checkpoint = tmp_path / "fsdp"
    save_dcp(checkpoint, {"model": {"w": torch.ones(3)}})
    plant_pickle(checkpoint / ".metadata", marker)
    with pytest.raises(DdpimgError, match=REFUSED) as caught:
        dcp.load({"model": {"w": torch.zeros(3)}}, checkpoint)
    assert str(checkpoint / ".metadata") in caught.value.message
    assert "asks for io.open" in caught.value.message
    assert not marker.exists()


def test_a_planted_dcp_value_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    """DCP stores non-tensor values (an optimizer's learning rate) as pickles of their own,
    which its planner loads with weights_only=False."""
    marker = tmp_path / "marker"
    checkpoint = tmp_path / "fsdp"
    save_dcp(checkpoint, {"model": {"w": torch.ones(3)}, "lr": Planted(marker)})
    assert not marker.exists()
    with pytest.raises(DdpimgError, match=REFUSED) as caught:
        dcp.load({"model": {"w": torch.zeros(3)}, "lr": 0.0}, checkpoint)
    assert str(checkpoint) in caught.value.message
    assert "asks for io.open" in caught.value.message
    assert not marker.exists()


def test_dcp_metadata_pointing_outside_its_folder_is_refused(tmp_path: Path) -> None:
    checkpoint = tmp_path / "fsdp"
    save_dcp(checkpoint, {"w": torch.ones(3)})
    metadata = pickle.loads((checkpoint / ".metadata").read_bytes())
    for info in metadata.storage_data.values():
        info.relative_path = "../../elsewhere.distcp"
    (checkpoint / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(DdpimgError, match="points outside the checkpoint"):
        read_dcp_metadata(checkpoint / ".metadata")


def test_a_dcp_checkpoint_loads_in_place_and_reads_whole(tmp_path: Path) -> None:
    checkpoint = tmp_path / "fsdp"
    weights = torch.randn(4, 5)
    save_dcp(checkpoint, {"model": {"w": weights, "b": torch.arange(3)}, "lr": 0.25})
    target = {"model": {"w": torch.zeros(4, 5), "b": torch.zeros(3, dtype=torch.int64)}, "lr": 0.0}
    dcp.load(target, checkpoint)
    assert torch.equal(target["model"]["w"], weights)  # type: ignore[index]
    assert target["lr"] == 0.25
    whole = dcp.read_model_state(checkpoint, "model.")
    assert sorted(whole) == ["b", "w"]
    assert torch.equal(whole["w"], weights)
    assert torch.equal(whole["b"], torch.arange(3))
