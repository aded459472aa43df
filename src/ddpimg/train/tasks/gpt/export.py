"""A ``train gpt`` run's checkpoint as a Hugging Face GPT-2 directory (``ddpimg export``).

The checkpoint is read in its strategy's own format, in one process, without a process
group, and assembled into the full model:

* DDP: ``ddp/model.pt``, the model as rank 0 held it.
* DeepSpeed: ZeRO 1-3 through DeepSpeed's own ``zero_to_fp32`` (the fp32 master weights,
  gathered from every rank's partition); ZeRO 0 keeps whole weights in the module state
  ``mp_rank_00_model_states.pt``.
* FSDP: torch.distributed.checkpoint, the model's tensors read whole (``dcp.read_model_state``).

Every file is read without unpickling code (``ddpimg.train.checkpoint.safeload``): a
refused one stops the export with exit status 2, before DeepSpeed's converter sees it.

The model's shape and the data's vocabulary come from the run's ``manifest.json`` (its
``data`` entry), which is why the run directory is named, not only the checkpoint; the
checkpoint's own record of the vocabulary must agree. The model holds the vocabulary padded
to a multiple of 64 (``model.Gpt``); the export cuts the padding off, so the Hugging Face
model has the data's vocabulary (50257 for GPT-2's) and the same logits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeGuard

import torch

from ddpimg.errors import DdpimgError
from ddpimg.run_files import MANIFEST_LIMIT
from ddpimg.train.checkpoint.files import CHECKPOINTS, candidates, verify
from ddpimg.train.checkpoint.resume import read_record
from ddpimg.train.checkpoint.safeload import load_tensors
from ddpimg.train.tasks.gpt.config import GptConfig, ShapeError
from ddpimg.train.tasks.gpt.hf import TIED, check_new_directory, write_hf_dir
from ddpimg.untrusted import read_json

MANIFEST = "manifest.json"
RUN_HINT = "give the --out directory of a train gpt run that wrote a checkpoint"


def choose_checkpoint(run: Path, checkpoint: Path | None) -> Path:
    """``checkpoint`` when it verifies, else the newest one of ``run`` that does."""
    if checkpoint is not None:
        reason = verify(checkpoint)
        if reason is not None:
            raise DdpimgError(f"--checkpoint {checkpoint}: the checkpoint {reason}", hint=RUN_HINT)
        return checkpoint
    for path in candidates(run / CHECKPOINTS):
        if verify(path) is None:
            return path
    raise DdpimgError(f"{run}: no valid checkpoint in {run / CHECKPOINTS}", hint=RUN_HINT)


def run_facts(run: Path) -> dict[str, Any]:
    """The ``data`` entry of the run's manifest.json (shape, vocabulary, end-of-text)."""
    path = run / MANIFEST
    try:
        manifest = read_json(path, MANIFEST_LIMIT)
    except FileNotFoundError as err:
        raise DdpimgError(f"{run}: no {MANIFEST}", hint=RUN_HINT) from err
    except (OSError, ValueError) as err:
        raise DdpimgError(f"{path} cannot be read ({err})", hint=RUN_HINT) from err
    facts = manifest.get("data") if isinstance(manifest, dict) else None
    if not isinstance(facts, dict) or not isinstance(facts.get("model"), dict):
        raise DdpimgError(
            f"{path} has no data.model entry (the model train gpt built)", hint=RUN_HINT
        )
    return facts


def model_state(directory: Path, strategy: str) -> Any:
    """The full model state dict of a strategy's checkpoint part (``<checkpoint>/<name>``),
    as loaded: ``check_state`` says whether it is one."""
    if strategy == "ddp":
        loaded = load_tensors(directory / "model.pt")
        return loaded.get("model") if isinstance(loaded, dict) else loaded
    if strategy == "fsdp":
        from ddpimg.train.checkpoint.dcp import read_model_state

        return read_model_state(directory, "model.")
    if strategy == "deepspeed":
        return _deepspeed_state(directory)
    raise DdpimgError(
        f"checkpoint {directory.parent}: strategy {strategy!r} is not one ddpimg exports",
        hint="ddp, deepspeed and fsdp checkpoints are exported",
    )


def _deepspeed_state(directory: Path) -> dict[str, torch.Tensor]:
    from ddpimg.train.strategies.deepspeed import CHECKPOINT_TAG
    from ddpimg.train.strategies.deepspeed_files import check_files, checkpoint_globals

    engine = directory / CHECKPOINT_TAG
    # DeepSpeed's converter unpickles with weights_only=False: every file is checked first.
    check_files(directory)
    if any(engine.glob("*zero_pp_rank_*_optim_states.pt")):
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        state: dict[str, torch.Tensor] = get_fp32_state_dict_from_zero_checkpoint(
            str(directory), tag=CHECKPOINT_TAG
        )
        return state
    states = load_tensors(engine / "mp_rank_00_model_states.pt", "cpu", checkpoint_globals())
    module: dict[str, torch.Tensor] = states["module"]
    return module


def export(run: Path, target: Path, checkpoint: Path | None = None) -> Path:
    """Write the checkpoint (``checkpoint``, or ``run``'s newest) as a Hugging Face GPT-2
    directory ``target``; returns the checkpoint exported."""
    check_new_directory(target)  # before the checkpoint is read: that may take long
    chosen = choose_checkpoint(run, checkpoint)
    record = read_record(chosen)
    trainer = record.fingerprint.get("trainer")
    if trainer != "gpt":
        raise DdpimgError(
            f"checkpoint {chosen} is of the {trainer} trainer",
            hint="only train gpt checkpoints export to the Hugging Face GPT-2 format",
        )
    facts = run_facts(run)
    shape, vocabulary, eot = export_shape(facts, run / MANIFEST)
    # Checkpoints record the vocabulary (``GptTask.fingerprint``; older ones do not): the
    # model's rows are it padded, so a manifest of another vocabulary padding to the same
    # rows would pass the shape checks and cut the embedding at the wrong row.
    recorded = record.fingerprint.get("vocabulary", vocabulary)
    if recorded != vocabulary:
        raise DdpimgError(
            f"checkpoint {chosen} has a vocabulary of {recorded} tokens, {run / MANIFEST} "
            f"one of {vocabulary}",
            hint="the checkpoint and manifest.json come from different runs: " + RUN_HINT,
        )
    loaded = model_state(chosen / record.strategy, record.strategy)
    check_state(loaded, shape, chosen)
    state = {key: value.float() for key, value in loaded.items()}
    state.setdefault(TIED, state["wte.weight"])
    write_hf_dir(target, shape, state, vocabulary, eot)
    return chosen


def export_shape(facts: dict[str, Any], path: Path) -> tuple[GptConfig, int, int | None]:
    """The model's shape, the data's vocabulary and end-of-text token from the manifest's
    ``data`` entry, each checked: a vocabulary from 1 to the model's (a negative one once
    cut the embedding from its end and wrote a broken model with exit status 0)."""
    try:
        shape = GptConfig.from_values(facts["model"])
        vocabulary, eot = facts.get("vocabulary"), facts.get("eot_token")
        if not _whole(vocabulary) or not 1 <= vocabulary <= shape.vocab_size:
            raise ShapeError(
                f"vocabulary is {vocabulary!r}, expected a whole number from 1 to the "
                f"model's {shape.vocab_size}"
            )
        if eot is not None and (not _whole(eot) or not 0 <= eot < vocabulary):
            raise ShapeError(f"eot_token is {eot!r}, expected a token below {vocabulary}")
    except ShapeError as err:
        raise DdpimgError(f"{path}: data.{err}", hint=RUN_HINT) from err
    return shape, vocabulary, eot


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def check_state(state: object, shape: GptConfig, checkpoint: Path) -> None:
    """``state`` is ``model.Gpt``'s state dict for ``shape`` (every key, tensors of its
    shapes; the tied output layer may be left out), checked before anything is written.
    The model's own is built on the meta device: shapes only, no memory."""
    problem = _state_problem(state, shape)
    if problem:
        raise DdpimgError(
            f"checkpoint {checkpoint}: {problem}",
            hint="the checkpoint and manifest.json come from different runs: " + RUN_HINT,
        )


def _state_problem(state: object, shape: GptConfig) -> str | None:
    from ddpimg.train.tasks.gpt.model import Gpt

    with torch.device("meta"):
        expected = {key: tuple(value.shape) for key, value in Gpt(shape).state_dict().items()}
    if not isinstance(state, dict):
        return f"a {type(state).__name__}, not a state dict"
    keys = set(state) | {TIED}
    if keys != set(expected):
        unknown, missing = sorted(map(str, keys - set(expected))), sorted(set(expected) - keys)
        return f"its keys are not the model's (unknown: {unknown[:3]}, missing: {missing[:3]})"
    for key, size in expected.items():
        value = state.get(key, torch.empty(size, device="meta"))
        found = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        if found != size:
            return f"{key} is {found}; the manifest's model makes it {size}"
    return None
