"""The bundled trainers: ``run_training`` is what ``train`` calls once the runtime has
initialised torch.distributed. Importing this package does not import torch."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ddpimg.errors import DdpimgError

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.config import TrainConfig
    from ddpimg.train.preemption import PreemptionWatch

__all__ = ["run_training"]


def run_training(
    config: TrainConfig, ctx: DistContext, preemption: PreemptionWatch | None = None
) -> int:
    """Train ``config.trainer`` with ``config.strategy`` in the initialised world ``ctx``,
    continuing from a checkpoint as ``--resume`` says.

    Returns 0 when the run completed, ``exitcodes.PREEMPTED`` when ``preemption`` stopped it
    after a checkpoint (manifest.json: status "preempted"). Errors propagate (a DdpimgError
    for user errors, to be reported as ``ddpimg: error:`` with ``exitcodes.for_error``) after rank 0
    recorded the failure and its exit status in manifest.json.
    """
    from ddpimg import exitcodes
    from ddpimg.train import startup
    from ddpimg.train.checkpoint import resolve_resume
    from ddpimg.train.loop import Trainer
    from ddpimg.train.outputs import RunRecorder
    from ddpimg.train.pairing import check_pairing
    from ddpimg.train.preemption import Preempted
    from ddpimg.train.strategies import strategy_for
    from ddpimg.train.tasks import trainer_for

    trainer = trainer_for(config)
    strategy_spec = strategy_for(config)
    check_pairing(trainer, strategy_spec, config, ctx.device.type)
    config = config.with_auto_precision(trainer.auto_precision(ctx.device.type))
    config.per_rank_batch(ctx.world_size)  # fails before anything is written
    task = trainer.factory(config, ctx)
    strategy = strategy_spec.factory(config, ctx)
    resume = resolve_resume(config, ctx, strategy.reshards_on_load, sys.stderr)
    recorder = (
        RunRecorder.start(config, ctx, os.environ, sys.stderr, resume) if ctx.is_main else None
    )
    startup.mark("setup")
    try:
        run = Trainer(config, ctx, task, strategy, recorder, resume=resume, preemption=preemption)
        summary = run.run()
    except Preempted as stop:
        if recorder is not None:
            print(
                f"ddpimg: {stop}; exit status {exitcodes.PREEMPTED} (run again with "
                "--resume auto to continue)",
                file=sys.stderr,
                flush=True,
            )
            recorder.manifest["preemption"] = {
                "cause": stop.cause,
                "step": stop.step,
                "checkpoint": str(stop.checkpoint),
            }
            recorder.finish("preempted", exitcodes.PREEMPTED)
        return exitcodes.PREEMPTED
    except BaseException as err:
        if recorder is not None:
            recorder.finish(*_failure(err))
        raise
    if recorder is not None:
        recorder.summary(summary.to_json())
        recorder.finish("completed", 0)
    return exitcodes.OK


def _failure(err: BaseException) -> tuple[str, int, str]:
    """Status, exit status and message that manifest.json records for a failed run."""
    from ddpimg import exitcodes

    code = exitcodes.for_error(err)
    if isinstance(err, KeyboardInterrupt):
        return "interrupted", code, "interrupted"
    if isinstance(err, DdpimgError):
        return "failed", code, str(err)
    if isinstance(err, SystemExit):
        return "failed", code, f"exit {err.code}"
    return "failed", code, f"{type(err).__name__}: {err}"
