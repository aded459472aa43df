"""ddpimg's part in a Lightning ``Trainer.fit`` (``lightning.pytorch`` or
``pytorch_lightning``; see the package docstring for how it attaches).

The callback:

* follows validation for the stall watch and records ``default_root_dir`` in the manifest;
* every ``log_every_n_steps`` optimizer steps writes the training loss, averaged over the
  ranks (``trainer.strategy.reduce``: one small all-reduce, on every rank at the same
  step), the learning rates and the scalars the script logged itself into metrics.jsonl on
  rank 0; after each validation, the ``val*`` metrics as an eval line;
* on preemption: at the step the ranks agree on, saves a checkpoint with
  ``trainer.save_checkpoint`` as Lightning's own SLURM requeue does (``hpc_ckpt_N.ckpt`` in
  ``default_root_dir``: under Slurm Lightning itself would resume from it) and ends the
  script (exit status 75); a requeued run of the same command resumes from it through
  ``fit(ckpt_path=...)``. Lightning handles SIGTERM itself (every rank stops at the next
  batch with ``SIGTERMException``); the callback then saves the same checkpoint from
  ``on_exception``, where every rank has arrived.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ddpimg.script.runtime import ScriptRuntime

FRAMEWORK = "lightning"
HPC_PREFIX = "hpc_ckpt_"
HPC_NAME = re.compile(rf"^{HPC_PREFIX}(\d+)\.ckpt$")


def hpc_versions(folder: str) -> list[int]:
    """The versions N of the ``hpc_ckpt_N.ckpt`` files in ``folder`` (Lightning's naming)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(int(m.group(1)) for m in map(HPC_NAME.match, names) if m)


def newest_hpc(folder: str) -> Callable[[], str | None]:
    def newest() -> str | None:
        versions = hpc_versions(folder)
        return os.path.join(folder, f"{HPC_PREFIX}{versions[-1]}.ckpt") if versions else None

    return newest


def next_hpc(folder: str) -> str:
    versions = hpc_versions(folder)
    return os.path.abspath(os.path.join(folder, f"{HPC_PREFIX}{(versions or [0])[-1] + 1}.ckpt"))


def _scalar(value: Any) -> float | None:
    try:
        return float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError):
        return None  # not a one-element number


def make_callback(base: type, sigterm: type, runtime: ScriptRuntime) -> Any:
    """An instance of ddpimg's callback, a subclass of the package's ``Callback``
    (``sigterm``: its ``SIGTERMException``)."""

    class DdpimgLightningCallback(base):  # type: ignore[misc]  # built at run time
        def __init__(self) -> None:
            self._step = -1

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            runtime.acting(FRAMEWORK)
            runtime.output_directory(FRAMEWORK, os.path.abspath(trainer.default_root_dir))
            runtime.at_step(trainer.global_step)
            self._step = trainer.global_step

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            step = trainer.global_step
            if step == self._step:
                return  # gradient accumulation: no optimizer step yet
            self._step = step
            runtime.at_step(step)
            if step % max(trainer.log_every_n_steps, 1) == 0:
                self._log_train(trainer, outputs, step, batch_idx)
            if runtime.stop_agreed(step, trainer.strategy.root_device):
                runtime.stop(self._save(trainer))

        def _log_train(self, trainer: Any, outputs: Any, step: int, batch_idx: int) -> None:
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            if loss is None:
                return
            mean = _scalar(trainer.strategy.reduce(loss.detach(), reduce_op="mean"))
            batches = trainer.num_training_batches
            epoch = trainer.current_epoch + (
                (batch_idx + 1) / batches if isinstance(batches, int) and batches else 0.0
            )
            logged = {
                name: _scalar(value)
                for name, value in trainer.callback_metrics.items()
                if not name.startswith("val")
            }
            lrs = [group["lr"] for opt in trainer.optimizers for group in opt.param_groups]
            runtime.log(
                "train",
                step,
                {"epoch": epoch, "loss": mean, "lr": lrs[0] if lrs else None, **logged},
            )

        def on_validation_batch_end(self, *_: Any, **__: Any) -> None:
            runtime.evaluating()

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            runtime.evaluated()
            metrics = {
                name.removeprefix("val_"): _scalar(value)
                for name, value in trainer.callback_metrics.items()
                if name.startswith("val")
            }
            if metrics and not trainer.sanity_checking:
                epoch = trainer.current_epoch
                runtime.log("eval", trainer.global_step, {"epoch": epoch, **metrics})

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            # Lightning's own SIGTERM stop: every rank is here (it synchronised them first).
            if isinstance(exception, sigterm) and runtime.preemption.received is not None:
                runtime.stop(self._save(trainer))

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            runtime.acting(FRAMEWORK, active=False)

        def _save(self, trainer: Any) -> str:
            """Every rank: Lightning's collective save (rank 0 writes, all meet after)."""
            path = next_hpc(trainer.default_root_dir)
            trainer.save_checkpoint(path)
            runtime.checkpoint_saved(path, trainer.global_step)
            return path

    return DdpimgLightningCallback()


def attach(module: ModuleType, runtime: ScriptRuntime) -> None:
    """Wrap ``module.Trainer.fit`` (see the package docstring)."""
    package = module.__name__.removesuffix(".trainer.trainer")  # lightning.pytorch, ...
    base = importlib.import_module(f"{package}.callbacks").Callback
    sigterm = importlib.import_module(f"{package}.utilities.exceptions").SIGTERMException
    trainer_class = module.Trainer
    original = trainer_class.fit
    if getattr(original, "__ddpimg__", False):
        return
    signature = inspect.signature(original)
    callback = make_callback(base, sigterm, runtime)

    @functools.wraps(original)
    def fit(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        trainer = bound.arguments["self"]
        if not any(existing is callback for existing in trainer.callbacks):
            trainer.callbacks.append(callback)
        if bound.arguments.get("ckpt_path") is None:
            chosen = runtime.resume_from(newest_hpc(str(trainer.default_root_dir)))
            if chosen is not None:
                bound.arguments["ckpt_path"] = chosen
        chosen = bound.arguments.get("ckpt_path")
        if isinstance(chosen, str | os.PathLike) and Path(chosen).is_file():
            runtime.resumed(FRAMEWORK, os.path.abspath(chosen), None)
        return original(*bound.args, **bound.kwargs)

    fit.__ddpimg__ = True  # type: ignore[attr-defined]  # marks the wrapper
    trainer_class.fit = fit
