"""GPT-2 weights in and out of the Hugging Face format, proved against transformers itself:
a random GPT2LMHeadModel saved with save_pretrained loads with --init-from and computes the
same logits (fp32, 1e-5), and a model of ours written by write_hf_dir loads back into
GPT2LMHeadModel with the same logits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from safetensors.torch import load_file

from ddpimg.errors import DdpimgError
from ddpimg.train.config import TrainConfig
from ddpimg.train.dropout import DropoutContext
from ddpimg.train.tasks.gpt import GptOptions
from ddpimg.train.tasks.gpt.config import GptConfig
from ddpimg.train.tasks.gpt.export import export
from ddpimg.train.tasks.gpt.hf import load_pretrained, read_config, write_hf_dir
from ddpimg.train.tasks.gpt.model import Gpt
from ddpimg.train.tasks.gpt.task import GptTask
from tests.train.contexts import single_process
from tests.train.tasks.gpt.test_export import write_run

# ddpimg's GPT and transformers' GPT2LMHeadModel compute the same logits in another order:
# they differ by at most 3.0e-7 at logits up to 1.2 (AVX2 kernels and
# ATEN_CPU_CAPABILITY=default, 2026-11-26), 3% of this; a wrong weight mapping changes them
# by 1e-2 to 1.
TOLERANCE = 1e-5


def hf_model(vocab: int = 97, positions: int = 32) -> torch.nn.Module:
    config = transformers.GPT2Config(
        vocab_size=vocab, n_positions=positions, n_embd=32, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    # Random biases and LayerNorms too, so that a missed or mixed-up tensor shows.
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model


def hf_logits(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits: torch.Tensor = model(tokens).logits
    return logits


def ours(model: Gpt, tokens: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        logits: torch.Tensor = model(tokens)
    return logits


@pytest.mark.parametrize("safe", [True, False])
def test_init_from_computes_transformers_logits(tmp_path: Path, safe: bool) -> None:
    reference = hf_model()
    reference.save_pretrained(tmp_path / "hf", safe_serialization=safe)
    shape = read_config(tmp_path / "hf")
    assert shape == GptConfig(n_layer=2, n_head=4, n_embd=32, block_size=32, vocab_size=97)
    model = Gpt(shape)
    assert model.wte.weight.shape == (128, 32)  # 97 padded inside the model
    load_pretrained(model, tmp_path / "hf")
    tokens = torch.randint(0, 97, (3, 32), generator=torch.Generator().manual_seed(1))
    assert torch.allclose(ours(model, tokens), hf_logits(reference, tokens), atol=TOLERANCE, rtol=0)


def test_the_task_takes_shape_and_weights_from_init_from(tmp_path: Path) -> None:
    reference = hf_model()
    reference.save_pretrained(tmp_path / "hf")
    config = TrainConfig(
        trainer="gpt", options=GptOptions(init_from=str(tmp_path / "hf")), out=tmp_path
    )
    task = GptTask(config, single_process())
    assert (task.shape.vocab_size, task.seq_len) == (97, 32)
    model = task.build_model(DropoutContext(1))
    assert isinstance(model, Gpt)
    tokens = torch.arange(32).view(1, 32)
    assert torch.allclose(ours(model, tokens), hf_logits(reference, tokens), atol=TOLERANCE, rtol=0)


def test_export_loads_back_into_transformers(tmp_path: Path) -> None:
    torch.manual_seed(3)
    shape = GptConfig(n_layer=2, n_head=2, n_embd=16, block_size=24, vocab_size=100)
    model = Gpt(shape)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    # A vocabulary of 100, padded to 128 inside the model: the export cuts the padding off.
    assert model.wte.weight.shape == (128, 16)
    write_hf_dir(tmp_path / "out", shape, model.state_dict(), vocabulary=100, eot_token=99)
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "out").eval()
    assert loaded.config.vocab_size == 100
    assert loaded.config.eos_token_id == 99
    tokens = torch.randint(0, 100, (2, 24), generator=torch.Generator().manual_seed(2))
    expected = ours(model, tokens)
    assert torch.allclose(hf_logits(loaded, tokens), expected, atol=TOLERANCE, rtol=0)
    with pytest.raises(DdpimgError, match=r"out exists already"):
        write_hf_dir(tmp_path / "out", shape, model.state_dict(), vocabulary=100, eot_token=99)


def test_a_gpt2_goes_through_init_from_and_export_bit_for_bit(tmp_path: Path) -> None:
    """GPT-2's 97 tokens are 128 rows inside ddpimg's model, invisible outside: its logits
    are transformers' over the 97, the checkpoint records 97, and ``ddpimg export`` writes
    back the very tensors it was given."""
    reference = hf_model()
    reference.save_pretrained(tmp_path / "hf")
    run = tmp_path / "run"
    config = TrainConfig(trainer="gpt", options=GptOptions(init_from=str(tmp_path / "hf")), out=run)
    task = GptTask(config, single_process())
    model = task.build_model(DropoutContext(1))
    assert isinstance(model, Gpt)
    assert model.wte.weight.shape == (128, 32)
    assert int(torch.count_nonzero(model.wte.weight[97:])) == 0
    tokens = torch.randint(0, 97, (3, 32), generator=torch.Generator().manual_seed(4))
    logits = hf_logits(reference, tokens)
    assert torch.allclose(ours(model, tokens), logits, atol=TOLERANCE, rtol=0)
    assert task.fingerprint() == {"vocabulary": 97}
    facts = task.data_facts()
    assert (facts["vocabulary"], facts["model"]["vocab_size"]) == (97, 97)
    write_run(run, facts, model.state_dict(), task.fingerprint())
    export(run, tmp_path / "out")
    given, written = (
        load_file(str(directory / "model.safetensors"))
        for directory in (tmp_path / "hf", tmp_path / "out")
    )
    assert written.keys() == given.keys()
    for key, tensor in given.items():
        assert torch.equal(written[key], tensor), key
    exported = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "out").eval()
    assert exported.config.vocab_size == 97
    assert torch.equal(hf_logits(exported, tokens), logits)


def _edit_config(directory: Path, **changes: object) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps(config | changes))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model_type": "llama"}, r"model_type is 'llama', not 'gpt2'"),
        ({"activation_function": "relu"}, r"activation_function is 'relu'; train gpt's model"),
        ({"n_inner": 100}, r"n_inner is 100; train gpt's MLP is 4 x n_embd = 128 wide"),
        ({"tie_word_embeddings": False}, r"tie_word_embeddings is False"),
        (
            {"n_embd": 48},
            r"transformer.wte.weight has shape \(97, 32\), config.json makes it \(97, 48\)",
        ),
        ({"n_layer": 3}, r"no transformer.h.2.ln_1.weight, which a 3-layer GPT-2 has"),
        ({"n_layer": 1}, r"unknown key transformer.h.1"),
    ],
)
def test_another_architecture_is_named_by_its_key(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    hf_model().save_pretrained(tmp_path / "hf")
    _edit_config(tmp_path / "hf", **changes)
    with pytest.raises(DdpimgError, match=message) as caught:
        load_pretrained(Gpt(read_config(tmp_path / "hf")), tmp_path / "hf")
    assert str(caught.value).startswith("--init-from ")


def test_a_directory_without_a_model_is_named(tmp_path: Path) -> None:
    with pytest.raises(DdpimgError, match=r"--init-from .*: no config.json there"):
        read_config(tmp_path)
    hf_model().save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "model.safetensors").unlink()
    with pytest.raises(DdpimgError, match=r"neither model.safetensors nor pytorch_model.bin"):
        load_pretrained(Gpt(read_config(tmp_path / "hf")), tmp_path / "hf")


def _rewrite_safetensors(path: Path, edit: Any = None, length: int | None = None) -> None:
    """``path``'s header edited by ``edit(header)``, or its length field set to ``length``."""
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header, data = json.loads(raw[8 : 8 + size]), raw[8 + size :]
    if edit is not None:
        edit(header)
    text = json.dumps(header).encode()
    prefix = (len(text) if length is None else length).to_bytes(8, "little")
    path.write_bytes(prefix + text + data)


def _first_tensor(header: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = next(v for k, v in header.items() if k != "__metadata__")
    return entry


@pytest.mark.parametrize(
    ("length", "edit", "message"),
    [
        (2**60, None, r"its header says it is 1,152,921,504,606,846,976 bytes long"),
        (
            None,
            lambda h: _first_tensor(h).update(data_offsets=[0, 10**12]),
            r"data_offsets \[0, 1000000000000\] run past the end of the data",
        ),
        (None, lambda h: _first_tensor(h).update(dtype="F7"), r"unknown dtype 'F7'"),
        (None, lambda h: _first_tensor(h).update(shape=[-1]), r"shape \[-1\] is not a list"),
        (None, lambda h: h.update(x=[1] * 3), r"tensor 'x': not an entry of dtype"),
        # A name or list of a million items is quoted cut to a line, not in full.
        (None, lambda h: h.update({"y" * 10**6: 1}), r"tensor 'y{76}\.\.\.: not an entry"),
        (
            None,
            lambda h: _first_tensor(h).update(data_offsets=[0] * 10**6),
            r"data_offsets \[0, (0, ){24}0\.\.\. is not a range",
        ),
    ],
)
def test_a_malformed_safetensors_header_is_a_named_error(
    tmp_path: Path, length: int | None, edit: Any, message: str
) -> None:
    """Offsets past the end, a header length of 2**60 and an unknown dtype were the
    library's SafetensorError tracebacks (exit 1); now exit 2 naming the file."""
    hf_model().save_pretrained(tmp_path / "hf")
    path = tmp_path / "hf" / "model.safetensors"
    _rewrite_safetensors(path, edit, length)
    with pytest.raises(DdpimgError, match=message) as caught:
        load_pretrained(Gpt(read_config(tmp_path / "hf")), tmp_path / "hf")
    assert caught.value.message.startswith(f"--init-from {path}: not a safetensors file")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n_head": 0}, r"n_head is 0, expected a whole number from 1 to 1,024"),
        ({"n_head": 5}, r"n_embd 32 is not divisible by n_head 5"),
        ({"n_layer": "2"}, r"n_layer is '2', expected a whole number"),
        ({"n_positions": True}, r"n_positions is True, expected a whole number"),
        ({"vocab_size": 10**12}, r"vocab_size is 1000000000000, expected a whole number from 1"),
        ({"vocab_size": 10**6}, r"describes a model of 32,\d{3},\d{3} parameters; .* holds"),
        ({"n_embd": 2**16}, r"describes a model of [\d,]+ parameters; .*model.safetensors holds"),
    ],
)
def test_a_config_json_shape_is_bounded_before_a_model_is_built(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    """n_head 0 was a ZeroDivisionError traceback; a vocabulary of 10**12 asked for
    terabytes. Both are named before any model exists (read_config builds none)."""
    hf_model().save_pretrained(tmp_path / "hf")
    _edit_config(tmp_path / "hf", **changes)
    with pytest.raises(DdpimgError, match=message) as caught:
        read_config(tmp_path / "hf")
    assert caught.value.message.startswith("--init-from ")


def test_the_shape_bounds_agree_with_the_data_and_the_model() -> None:
    from ddpimg.data.tokenshards import MAX_VOCABULARY
    from ddpimg.train.tasks.gpt.config import MAX_DIMENSIONS

    assert MAX_DIMENSIONS["vocab_size"] == MAX_VOCABULARY
    shape = GptConfig(n_layer=3, n_head=2, n_embd=16, block_size=24, vocab_size=50)
    assert shape.parameters == Gpt(shape).num_parameters()
