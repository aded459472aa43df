"""GPT-2 weights in and out of the Hugging Face format: a model directory with
``config.json`` and ``model.safetensors`` (or the older ``pytorch_model.bin``), as
``GPT2LMHeadModel.save_pretrained`` writes it and ``from_pretrained`` reads it.

The two models are the same network with other names and layouts:

* Hugging Face prefixes the body with ``transformer.``; older files (``pytorch_model.bin``
  of the original GPT-2 upload) have no prefix and carry the attention's causal-mask
  buffers (``attn.bias``, ``attn.masked_bias``), which are not weights and are dropped.
* Its projections are ``Conv1D`` layers, whose weight is the transpose of
  ``nn.Linear``'s: ``attn.c_attn``, ``attn.c_proj``, ``mlp.c_fc``, ``mlp.c_proj``.
* The output layer is tied to the token embedding (``tie_word_embeddings``); the files
  hold the embedding only (or both, equal).
* Vocabulary: ``model.Gpt`` holds its vocabulary padded to a multiple of 64 (50304 rows
  for GPT-2's 50257) and computes logits of the real tokens only. Imported (``--init-from``),
  the checkpoint's rows are copied and the padding rows are zeros (never read: no token is a
  padding id, and no padding logit is computed into a softmax); exported, the embedding is
  cut back to the real vocabulary, which ``config.json`` says. A GPT-2 goes in and out with
  its 50257 rows bit for bit.

Everything else must be GPT-2's architecture as ``model.Gpt`` computes it; a config that
says otherwise (another ``model_type``, activation, LayerNorm epsilon, MLP width, untied or
cross-attention layers) or a tensor of another shape is an error naming the key.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from ddpimg.errors import DdpimgError, printable
from ddpimg.train.checkpoint.safeload import load_tensors
from ddpimg.train.tasks.gpt.config import GptConfig, ShapeError
from ddpimg.train.tasks.gpt.model import Gpt
from ddpimg.train.tasks.gpt.safetensors_header import read_header
from ddpimg.untrusted import MIB, read_json

CONFIG_FILE = "config.json"
CONFIG_LIMIT = MIB  # a GPT-2 config.json is about 1 KiB
SAFETENSORS_FILE = "model.safetensors"
PYTORCH_FILE = "pytorch_model.bin"
PREFIX = "transformer."
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
MASK_BUFFERS = (".attn.bias", ".attn.masked_bias")
TIED = "lm_head.weight"
EMBEDDING = "wte.weight"
LAYER_NORM_EPSILON = 1e-5
# What model.Gpt computes, as GPT2Config says it: any other value is refused.
REQUIRED: dict[str, tuple[object, ...]] = {
    "activation_function": ("gelu_new", "gelu_pytorch_tanh"),
    "layer_norm_epsilon": (LAYER_NORM_EPSILON,),
    "scale_attn_weights": (True,),
    "scale_attn_by_inverse_layer_idx": (False,),
    "add_cross_attention": (False,),
    "tie_word_embeddings": (True,),
}
HF_HINT = (
    "give a Hugging Face GPT-2 directory (config.json with model_type gpt2, and "
    "model.safetensors or pytorch_model.bin), as GPT2LMHeadModel.save_pretrained writes it"
)


def _error(message: str, hint: str = HF_HINT) -> DdpimgError:
    return DdpimgError(f"--init-from {message}", hint=hint)


def read_config(directory: Path) -> GptConfig:
    """The model shape ``directory/config.json`` describes; DdpimgError naming the key that
    is missing or describes another architecture."""
    path = directory / CONFIG_FILE
    try:
        config = read_json(path, CONFIG_LIMIT)
    except FileNotFoundError as err:
        raise _error(f"{directory}: no {CONFIG_FILE} there") from err
    except (OSError, ValueError) as err:
        raise _error(f"{path} cannot be read as JSON ({err})") from err
    if not isinstance(config, dict):
        raise _error(f"{path} is not a JSON object")
    if config.get("model_type") != "gpt2":
        raise _error(
            f"{path}: model_type is {config.get('model_type')!r}, not 'gpt2' (architectures: "
            f"{config.get('architectures')})",
            hint="only GPT-2 checkpoints load into train gpt",
        )
    for key, allowed in REQUIRED.items():
        if key in config and config[key] not in allowed:
            raise _error(
                f"{path}: {key} is {config[key]!r}; train gpt's model has {allowed[0]!r}",
                hint="only GPT-2's own architecture loads into train gpt",
            )
    try:
        shape = GptConfig.from_values(config, {"block_size": "n_positions"})
    except ShapeError as err:
        raise _error(f"{path}: {err}") from err
    width = shape.n_embd
    inner = config.get("n_inner")
    if inner is not None and inner != 4 * width:
        raise _error(
            f"{path}: n_inner is {inner}; train gpt's MLP is 4 x n_embd = {4 * width} wide",
            hint="only GPT-2's own architecture loads into train gpt",
        )
    _check_weights_hold(directory, shape, path)
    return shape


def _check_weights_hold(directory: Path, shape: GptConfig, config: Path) -> None:
    """The weights file must be large enough for the shape's parameters (a byte each at
    least): checked before a model of that shape is built, so that a small config.json
    cannot make ddpimg allocate a model no file holds."""
    for name in (SAFETENSORS_FILE, PYTORCH_FILE):
        path = directory / name
        if path.is_file():
            size = path.stat().st_size
            if shape.parameters > size:
                raise _error(
                    f"{config} describes a model of {shape.parameters:,} parameters; "
                    f"{path} holds {size:,} bytes",
                    hint="the weights and config.json come from different models",
                )
            return


def read_weights(directory: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """The tensors of ``model.safetensors`` (preferred) or ``pytorch_model.bin``, with the
    ``transformer.`` prefix and the attention mask buffers removed, and the file read."""
    safetensors_path = directory / SAFETENSORS_FILE
    pytorch_path = directory / PYTORCH_FILE
    if safetensors_path.is_file():
        raw, path = _load_safetensors(safetensors_path), safetensors_path
    elif pytorch_path.is_file():
        raw, path = load_tensors(pytorch_path), pytorch_path
    else:
        raise _error(
            f"{directory}: neither {SAFETENSORS_FILE} nor {PYTORCH_FILE} is there (a sharded "
            "checkpoint's *.index.json is not read)"
        )
    weights = {
        key.removeprefix(PREFIX): tensor
        for key, tensor in raw.items()
        if not key.endswith(MASK_BUFFERS)
    }
    return weights, path


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of ``path``, its header checked first (``safetensors_header``); the
    library's own refusal is a named error too."""
    from safetensors.torch import load_file

    try:
        read_header(path)
        tensors: dict[str, torch.Tensor] = load_file(str(path))
    except (OSError, ValueError) as err:
        raise _error(f"{path}: not a safetensors file ddpimg can read ({err})") from err
    except Exception as err:  # SafetensorError, which the library does not export by name
        if type(err).__name__ != "SafetensorError":
            raise
        raise _error(f"{path}: not a safetensors file ddpimg can read ({err})") from err
    return tensors


def from_hf(
    weights: dict[str, torch.Tensor], shape: GptConfig, path: Path
) -> dict[str, torch.Tensor]:
    """A ``model.Gpt`` state dict of ``shape`` from Hugging Face tensors; DdpimgError naming
    the key that is missing, unknown or of another size."""
    with torch.device("meta"):
        expected = {k: v.shape for k, v in Gpt(shape).state_dict().items() if k != TIED}
    # The file holds the real vocabulary's rows; the model's padding is added below.
    expected[EMBEDDING] = torch.Size((shape.vocab_size, shape.n_embd))
    tied = weights.pop(TIED, None)
    if tied is not None and not torch.equal(tied, weights.get(EMBEDDING, tied)):
        raise _error(
            f"{path}: {TIED} differs from {PREFIX}wte.weight (an untied output layer)",
            hint="train gpt ties the output layer to the token embedding, as GPT-2 does",
        )
    unknown = sorted(set(weights) - set(expected))
    if unknown:
        raise _error(f"{path}: unknown key {PREFIX}{unknown[0]} ({len(unknown)} unknown in all)")
    state: dict[str, torch.Tensor] = {}
    for key, size in expected.items():
        if key not in weights:
            raise _error(f"{path}: no {PREFIX}{key}, which a {shape.n_layer}-layer GPT-2 has")
        tensor = weights[key].t() if key.endswith(CONV1D) else weights[key]
        if tensor.shape != size:
            found = tuple(weights[key].shape)
            wanted = tuple(size[::-1]) if key.endswith(CONV1D) else tuple(size)
            raise _error(
                f"{path}: {PREFIX}{key} has shape {found}, {CONFIG_FILE} makes it {wanted}",
                hint="the weights and config.json come from different models",
            )
        state[key] = tensor.float().contiguous()
    padding = shape.padded_vocab_size - shape.vocab_size
    state[EMBEDDING] = torch.cat(
        (state[EMBEDDING], state[EMBEDDING].new_zeros(padding, shape.n_embd))
    )
    state[TIED] = state[EMBEDDING]
    return state


def load_pretrained(model: Gpt, directory: Path) -> None:
    """Copy the weights of the Hugging Face directory into ``model`` (of its shape)."""
    weights, path = read_weights(directory)
    model.load_state_dict(from_hf(weights, model.config, path))


def to_hf(state: dict[str, torch.Tensor], vocabulary: int) -> dict[str, torch.Tensor]:
    """Hugging Face tensors (``transformer.`` names, Conv1D layouts, no tied output layer)
    from a ``model.Gpt`` state dict, the embedding cut to ``vocabulary`` rows (the model's
    padding dropped)."""
    tensors = {}
    for key, tensor in state.items():
        if key == TIED:
            continue
        value = tensor.detach().float().cpu()
        if key.endswith(CONV1D):
            value = value.t()
        if key == EMBEDDING:
            value = value[:vocabulary]
        tensors[PREFIX + key] = value.contiguous().clone()
    return tensors


def hf_config(shape: GptConfig, vocabulary: int, eot_token: int | None) -> dict[str, Any]:
    """``config.json`` of a GPT2LMHeadModel computing what ``model.Gpt`` computes (no
    dropout: train gpt has none)."""
    config: dict[str, Any] = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": vocabulary,
        "n_positions": shape.block_size,
        "n_embd": shape.n_embd,
        "n_layer": shape.n_layer,
        "n_head": shape.n_head,
        "n_inner": None,
        "activation_function": "gelu_new",
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "layer_norm_epsilon": LAYER_NORM_EPSILON,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
    if eot_token is not None:
        config |= {"bos_token_id": eot_token, "eos_token_id": eot_token}
    return config


def check_new_directory(directory: Path) -> None:
    """``directory`` is not there yet, not even as a symbolic link: the export is renamed to
    that name, and a link (one left dangling too) is neither followed nor replaced."""
    if directory.is_symlink():
        raise DdpimgError(
            f"{printable(str(directory))} is a symbolic link (to "
            f"{printable(os.readlink(directory))}), not a new directory",
            hint="export into a new directory, or remove the link",
        )
    if directory.exists():
        raise DdpimgError(
            f"{printable(str(directory))} exists already",
            hint="export into a new directory, or remove it",
        )


def write_hf_dir(
    directory: Path,
    shape: GptConfig,
    state: dict[str, torch.Tensor],
    vocabulary: int,
    eot_token: int | None,
) -> None:
    """Write ``config.json`` and ``model.safetensors`` into ``directory`` (made under a
    temporary name and renamed, so it is whole or absent)."""
    from safetensors.torch import save_file

    check_new_directory(directory)
    staging = directory.with_name(f".{directory.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        save_file(to_hf(state, vocabulary), str(staging / SAFETENSORS_FILE), {"format": "pt"})
        config = hf_config(shape, vocabulary, eot_token)
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        staging.rename(directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
