"""A trainer's run without ``--out``: rank 0 chooses its directory under the runs root
(``ddpimg.runs``) and every rank writes there. An earlier run is "the same configuration"
when it is a run of the same trainer whose trajectory options match (the test
``--resume auto`` applies to a checkpoint: ``checkpoint.resume.same_trajectory``), so the
directory it continues holds checkpoints this run can load.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ddpimg.runs.choose import choose_run_dir
from ddpimg.train.checkpoint.resume import same_trajectory
from ddpimg.train.coordination import decided_on_main

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.config import TrainConfig


def same_training(config: TrainConfig, global_batch: int) -> Callable[[Mapping[str, Any]], bool]:
    """Whether an earlier run's manifest is a run of ``config``'s trainer and trajectory,
    ``global_batch`` samples a step."""

    def same(manifest: Mapping[str, Any]) -> bool:
        arguments = manifest.get("arguments")
        return (
            "script" not in manifest
            and isinstance(arguments, Mapping)
            and arguments.get("trainer") == config.trainer
            and same_trajectory(manifest, config, global_batch)
        )

    return same


def own_run_directory(
    config: TrainConfig,
    global_batch: int,
    ctx: DistContext,
    root: Path,
    *,
    env: Mapping[str, str],
    stream: TextIO,
) -> TrainConfig:
    """``config`` (``global_batch`` samples a step) with ``out`` the run's own directory under
    ``root``, chosen by rank 0 (its line on ``stream``). Collective; a DdpimgError on rank 0
    is every rank's."""

    def choose() -> str:
        same = same_training(config, global_batch)
        chosen = choose_run_dir(
            root, config.trainer, same, resume=config.resume, env=env, stream=stream
        )
        return str(chosen)

    return replace(config, out=Path(decided_on_main(ctx, choose)))
