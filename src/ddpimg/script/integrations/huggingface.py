"""ddpimg's part in a Hugging Face ``transformers.Trainer`` run (see the package docstring for
how it attaches).

The callback:

* follows evaluation (``on_prediction_step``) and checkpoints (``on_save``) for the stall
  watch, and records ``output_dir`` in the manifest;
* writes what the Trainer logs into metrics.jsonl on rank 0: ``loss`` (transformers
  averages it over the ranks and the steps since the last log), ``learning_rate``,
  ``grad_norm``, ``epoch`` (fractional), samples/s over the global batch, and the eval
  metrics; the final ``train_runtime`` / ``train_samples_per_second`` go to the summary;
* on preemption: at the step the ranks agree on, asks the Trainer for a checkpoint
  (``should_save``; an evaluation due at that step is skipped) and to stop, and once every
  rank has returned from that save, ends the script (exit status 75). A requeued run of the
  same command resumes from that ``checkpoint-N`` (the Trainer's own resume: model,
  optimizer, scheduler, RNG states and the data position).
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ddpimg.script.runtime import ScriptRuntime

FRAMEWORK = "huggingface"
# What transformers logs that metrics.jsonl names otherwise.
TRAIN_FIELDS = {"loss": "loss", "learning_rate": "lr", "grad_norm": "grad_norm"}
STEP_OF_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


def checkpoint_step(path: str) -> int:
    """The optimizer steps a ``checkpoint-N`` directory was written after (its
    trainer_state.json, else its name)."""
    try:
        with open(os.path.join(path, "trainer_state.json"), encoding="utf-8") as stream:
            return int(json.load(stream)["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        match = STEP_OF_CHECKPOINT.match(os.path.basename(os.path.normpath(path)))
        return int(match.group(1)) if match else 0


def _scalars(logs: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, float]:
    found = {new: logs.get(old) for old, new in names.items()}
    return {name: float(value) for name, value in found.items() if isinstance(value, int | float)}


class DdpimgTrainerCallback(TrainerCallback):
    """See the module docstring; one instance per process, reused by every Trainer."""

    def __init__(self, runtime: ScriptRuntime) -> None:
        self.runtime = runtime
        self._stopping = False
        self._global_batch = 0
        self._last_log: tuple[int, float] = (0, time.monotonic())

    def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self.runtime.acting(FRAMEWORK)
        self.runtime.output_directory(FRAMEWORK, os.path.abspath(args.output_dir))
        self.runtime.at_step(state.global_step)
        self._stopping = False
        self._global_batch = (
            args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        )
        self._last_log = (state.global_step, time.monotonic())
        self.runtime.summarize(global_batch_size=self._global_batch)

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self.runtime.at_step(state.global_step)
        if self.runtime.stop_agreed(state.global_step, args.device):
            self._stopping = True
            control.should_save = True
            control.should_evaluate = False
            control.should_training_stop = True

    def on_prediction_step(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self.runtime.evaluating()

    def on_evaluate(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self.runtime.evaluated()

    def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        path = os.path.abspath(
            os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        )
        self.runtime.checkpoint_saved(path, state.global_step)
        if self._stopping:
            _barrier()  # every rank's part (its RNG state, a shard) is written
            self.runtime.stop(path)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **_: Any
    ) -> None:
        if not logs or not state.is_world_process_zero:
            return
        step = state.global_step
        if "loss" in logs:
            last_step, last_time = self._last_log
            now = time.monotonic()
            rate = (step - last_step) * self._global_batch / max(now - last_time, 1e-9)
            self._last_log = (step, now)
            fields = _scalars(logs, TRAIN_FIELDS)
            self.runtime.log("train", step, {"epoch": state.epoch, **fields, "samples_per_s": rate})
        elif "eval_loss" in logs:
            metrics = {
                name.removeprefix("eval_"): float(value)
                for name, value in logs.items()
                if isinstance(value, int | float)
            }
            self.runtime.log("eval", step, {"epoch": state.epoch, **metrics})
        elif "train_runtime" in logs:
            self.runtime.summarize(
                **_scalars(
                    logs,
                    {
                        "train_samples_per_second": "samples_per_s",
                        "train_loss": "mean_loss",
                        "train_runtime": "train_runtime_s",
                    },
                ),
                epochs=state.epoch,
            )

    def on_train_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self.runtime.acting(FRAMEWORK, active=False)


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _newest(output_dir: str) -> Callable[[], str | None]:
    def newest() -> str | None:
        if not os.path.isdir(output_dir):
            return None
        found = get_last_checkpoint(output_dir)  # type: ignore[no-untyped-call]
        return None if found is None else str(found)

    return newest


def attach(module: ModuleType, runtime: ScriptRuntime) -> None:
    """Wrap ``module.Trainer.train`` (see the package docstring)."""
    trainer_class = module.Trainer
    original = trainer_class.train
    if getattr(original, "__ddpimg__", False):
        return
    callback = DdpimgTrainerCallback(runtime)

    @functools.wraps(original)
    def train(self: Any, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        if callback not in self.callback_handler.callbacks:
            self.add_callback(callback)
        newest = _newest(str(self.args.output_dir))
        if resume_from_checkpoint is None or resume_from_checkpoint is False:
            resume_from_checkpoint = runtime.resume_from(newest)
        # True: the Trainer takes the newest itself (and fails if there is none).
        path = newest() if resume_from_checkpoint is True else resume_from_checkpoint
        if isinstance(path, str | os.PathLike):
            path = os.path.abspath(path)
            runtime.resumed(FRAMEWORK, path, checkpoint_step(path))
        return original(self, resume_from_checkpoint, *args, **kwargs)

    train.__ddpimg__ = True  # type: ignore[attr-defined]  # marks the wrapper
    trainer_class.train = train
