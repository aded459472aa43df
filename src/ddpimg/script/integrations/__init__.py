"""How ddpimg follows a script it does not change.

* Every script: torch's global optimizer step hooks
  (``torch.optim.optimizer.register_optimizer_step_pre_hook`` / ``_post_hook``) tell the
  runtime where the script is: ``optimizer`` during a step, ``train`` between two. Any
  ``torch.optim.Optimizer`` passes through them, whatever wraps it (DDP, FSDP, DeepSpeed's
  ZeRO optimizers, Accelerate, Lightning).
* Hugging Face ``transformers.Trainer`` and Lightning ``Trainer`` (``lightning`` and
  ``pytorch_lightning``): when the script first imports the module that defines the
  ``Trainer`` class (``ddpimg.script.imports``), ddpimg wraps that class's entry point once
  (``Trainer.train``, ``Trainer.fit``). The wrapper adds ddpimg's callback through the
  framework's own public API (``Trainer.add_callback``; Lightning's ``trainer.callbacks``)
  and, when the script passes no checkpoint and this run continues one that did not
  complete, passes the framework's newest checkpoint as its own argument
  (``resume_from_checkpoint``, ``ckpt_path``). Nothing else of the framework is touched.

``--no-integrations`` turns the framework part off; the optimizer hooks stay (they only
record where the script is).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ddpimg.script.imports import when_imported
from ddpimg.script.runtime import ScriptRuntime

# The module that defines each framework's Trainer -> ddpimg's integration for it.
FRAMEWORKS = {
    "transformers.trainer": "ddpimg.script.integrations.huggingface",
    "lightning.pytorch.trainer.trainer": "ddpimg.script.integrations.lightning",
    "pytorch_lightning.trainer.trainer": "ddpimg.script.integrations.lightning",
}


def watch_optimizer_steps(runtime: ScriptRuntime) -> None:
    """Register the global optimizer step hooks once torch.optim is imported."""

    def register(optimizer: ModuleType) -> None:
        def before(*_: Any) -> None:
            runtime.optimizer_step_begins()

        def after(*_: Any) -> None:
            runtime.optimizer_step_ended()

        optimizer.register_optimizer_step_pre_hook(before)
        optimizer.register_optimizer_step_post_hook(after)

    when_imported("torch.optim.optimizer", register)


def attach_frameworks(runtime: ScriptRuntime) -> None:
    """Attach each framework's integration when the script imports that framework."""
    for module_name, integration in FRAMEWORKS.items():

        def attach(module: ModuleType, integration: str = integration) -> None:
            importlib.import_module(integration).attach(module, runtime)

        when_imported(module_name, attach)
