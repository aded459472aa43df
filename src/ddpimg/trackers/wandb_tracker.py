"""Weights & Biases: a run under ``--out/wandb``, offline unless ``WANDB_MODE`` says
otherwise (``ddpimg.trackers.settings`` says why), uploaded later by ``ddpimg sync``.

The run's id is kept in ``--out/trackers.json``: a job that resumes from one of ``--out``'s
checkpoints opens the same id with ``resume="allow"``, so W&B continues that run (offline,
a second run directory with the same id, which W&B's sync uploads after the first).
Values are logged at the optimizer step (``step=``); a resumed run's steps follow the
checkpoint's, so they continue the history where it stopped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddpimg import exitcodes
from ddpimg.trackers.settings import WANDB, TrackerSettings


class WandbTracker:
    name = WANDB

    def __init__(self, run: Any) -> None:
        self.run = run

    @classmethod
    def open(
        cls,
        settings: TrackerSettings,
        described: Mapping[str, Any],
        previous: Mapping[str, Any] | None,
        resume_step: int | None,
    ) -> WandbTracker:
        import wandb
        from wandb.sdk.lib.runid import generate_id

        run_id = previous.get("run_id") if previous is not None else None
        run = wandb.init(
            project=settings.project,
            entity=settings.wandb_entity or None,
            name=settings.run_name,
            group=settings.run_group or None,
            dir=str(settings.out),
            mode=settings.wandb_mode,  # type: ignore[arg-type]
            id=str(run_id) if run_id else generate_id(),
            resume="allow",
            config=dict(described),
            settings=wandb.Settings(
                # ddpimg's own progress lines stay on stderr, uncaptured and unwrapped.
                console="off",
                silent=True,
                # train is not a git checkout or a notebook: nothing to gain, time to lose.
                disable_git=True,
                save_code=False,
            ),
            allow_val_change=True,
        )
        return cls(run)

    @property
    def state(self) -> dict[str, Any]:
        return {"run_id": self.run.id}

    def log(self, values: Mapping[str, float], step: int) -> None:
        self.run.log(dict(values), step=step)

    def finish(self, status: str, exit_status: int) -> None:
        if exit_status == exitcodes.PREEMPTED:
            self.run.mark_preempting()
        self.run.summary["ddpimg_status"] = status
        self.run.finish(exit_code=exit_status)
