"""``ddpimg export``'s checks of what it reads (issue 47): the manifest's model, vocabulary
and end-of-text token, and the checkpoint's tensors against that model, before anything is
written. A negative vocabulary once cut the embedding from its end and wrote a broken model
with exit status 0; a mistyped model entry was a TypeError traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from ddpimg.errors import DdpimgError
from ddpimg.train.checkpoint.files import write_marker
from ddpimg.train.checkpoint.state import CheckpointRecord, LoopState
from ddpimg.train.tasks.gpt.config import GptConfig
from ddpimg.train.tasks.gpt.export import export
from ddpimg.train.tasks.gpt.model import Gpt

SHAPE = GptConfig(n_layer=1, n_head=2, n_embd=8, block_size=16, vocab_size=64)
MODEL = {"n_layer": 1, "n_head": 2, "n_embd": 8, "block_size": 16, "vocab_size": 64}


def write_run(
    run: Path, data: dict[str, Any], state: Any = None, task_facts: dict[str, int] | None = None
) -> None:
    """A train gpt run (DDP) with one checkpoint holding ``state`` (the model's own by
    default) and ``task_facts`` in its fingerprint, and ``data`` as its manifest's data
    entry."""
    checkpoint = run / "checkpoints" / "step-00000001"
    (checkpoint / "ddp").mkdir(parents=True)
    torch.manual_seed(0)
    model_state = Gpt(SHAPE).state_dict() if state is None else state
    torch.save({"model": model_state, "optimizer": {}}, checkpoint / "ddp" / "model.pt")
    record = CheckpointRecord(
        loop=LoopState(step=1, epoch=1, index=1),
        world_size=1,
        global_batch=2,
        strategy="ddp",
        fingerprint={"trainer": "gpt"} | (task_facts or {}),
        metrics_lines=0,
        reason="interval",
        saved_utc="2026-01-01T00:00:00Z",
    )
    (checkpoint / "loop.json").write_text(json.dumps(record.to_json()))
    write_marker(checkpoint, 1)
    (run / "manifest.json").write_text(json.dumps({"data": data}))


def test_a_valid_run_exports(tmp_path: Path) -> None:
    # As ddpimg wrote manifests before the padding was the model's own: the padded size.
    write_run(tmp_path / "run", {"model": MODEL, "vocabulary": 60, "eot_token": 59})
    export(tmp_path / "run", tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["vocab_size"] == 60


def test_the_checkpoints_vocabulary_must_be_the_manifests(tmp_path: Path) -> None:
    # Vocabularies of 60 and 62 both pad to SHAPE's 64 rows: only the record tells them apart.
    model = MODEL | {"vocab_size": 60}
    write_run(tmp_path / "run", {"model": model, "vocabulary": 60}, task_facts={"vocabulary": 62})
    with pytest.raises(
        DdpimgError,
        match=r"step-00000001 has a vocabulary of 62 tokens, .*manifest.json one of 60\n"
        r"  hint: the checkpoint and manifest.json come from different runs",
    ):
        export(tmp_path / "run", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"model": MODEL, "vocabulary": -5},
            r"data.vocabulary is -5, expected a whole number from 1 to the model's 64",
        ),
        ({"model": MODEL, "vocabulary": 65}, r"data.vocabulary is 65"),
        ({"model": MODEL, "vocabulary": 60, "eot_token": 60}, r"data.eot_token is 60"),
        ({"model": MODEL | {"n_head": "2"}, "vocabulary": 60}, r"data.n_head is '2'"),
        ({"model": MODEL | {"dropout": 0.1}, "vocabulary": 60}, None),
        ({"model": {"n_layer": 1}, "vocabulary": 60}, r"data.no n_head key"),
        ({"model": MODEL | {"vocab_size": 10**12}, "vocabulary": 60}, r"data.vocab_size is"),
    ],
)
def test_a_malformed_manifest_is_named_and_nothing_is_written(
    tmp_path: Path, data: dict[str, Any], message: str | None
) -> None:
    write_run(tmp_path / "run", data)
    if message is None:  # an unknown key of the model entry is left alone
        export(tmp_path / "run", tmp_path / "hf")
        return
    with pytest.raises(DdpimgError, match=message) as caught:
        export(tmp_path / "run", tmp_path / "hf")
    assert caught.value.message.startswith(f"{tmp_path / 'run' / 'manifest.json'}: ")
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.pop("wpe.weight"), r"missing: \['wpe.weight'\]"),
        (lambda s: s.update(extra=torch.zeros(1)), r"unknown: \['extra'\]"),
        (
            lambda s: s.update({"wte.weight": torch.zeros(10, 8)}),
            r"wte.weight is \(10, 8\); the manifest's model makes it \(64, 8\)",
        ),
        (lambda s: s.update({"ln_f.bias": [0.0] * 8}), r"ln_f.bias is list"),
    ],
)
def test_a_checkpoint_of_another_model_is_named(tmp_path: Path, edit: Any, message: str) -> None:
    state = Gpt(SHAPE).state_dict()
    edit(state)
    write_run(tmp_path / "run", {"model": MODEL, "vocabulary": 60}, state)
    with pytest.raises(DdpimgError, match=message):
        export(tmp_path / "run", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_a_model_file_of_the_wrong_kind_is_named(tmp_path: Path) -> None:
    write_run(tmp_path / "run", {"model": MODEL, "vocabulary": 60})
    path = tmp_path / "run" / "checkpoints" / "step-00000001" / "ddp" / "model.pt"
    torch.save([1, 2, 3], path)
    write_marker(path.parents[1], 1)
    with pytest.raises(DdpimgError, match=r"a list, not a state dict"):
        export(tmp_path / "run", tmp_path / "hf")
