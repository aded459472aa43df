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
``data`` entry), which is why the run directory is named, not only the checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ddpimg.errors import DdpimgError
from ddpimg.train.checkpoint.files import CHECKPOINTS, candidates, verify
from ddpimg.train.checkpoint.resume import read_record
from ddpimg.train.checkpoint.safeload import load_tensors
from ddpimg.train.tasks.gpt.config import GptConfig
from ddpimg.train.tasks.gpt.hf import TIED, write_hf_dir

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
        manifest = json.loads(path.read_text(encoding="utf-8"))
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


def model_state(directory: Path, strategy: str) -> dict[str, torch.Tensor]:
    """The full model state dict of a strategy's checkpoint part (``<checkpoint>/<name>``)."""
    if strategy == "ddp":
        state: dict[str, torch.Tensor] = load_tensors(directory / "model.pt")["model"]
        return state
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
    chosen = choose_checkpoint(run, checkpoint)
    record = read_record(chosen)
    trainer = record.fingerprint.get("trainer")
    if trainer != "gpt":
        raise DdpimgError(
            f"checkpoint {chosen} is of the {trainer} trainer",
            hint="only train gpt checkpoints export to the Hugging Face GPT-2 format",
        )
    facts = run_facts(run)
    shape = GptConfig(**facts["model"])
    state = {
        key: value.float()
        for key, value in model_state(chosen / record.strategy, record.strategy).items()
    }
    state.setdefault(TIED, state["wte.weight"])
    write_hf_dir(target, shape, state, int(facts["vocabulary"]), facts.get("eot_token"))
    return chosen
