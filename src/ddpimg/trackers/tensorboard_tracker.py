"""TensorBoard: event files under ``--out/tensorboard``, written with PyTorch's
``SummaryWriter`` (``torch.utils.tensorboard``).

A fresh run removes the event files an earlier run left there (metrics.jsonl starts over
too); a resumed one keeps them and opens its writer with ``purge_step`` at its first step,
so TensorBoard hides what the stopped run wrote after the checkpoint it resumed from
(TensorBoard's own mechanism for a restart; see ``SummaryWriter``'s documentation).
The manifest's parameters are written once as a text summary (``config``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddpimg.trackers.records import parameters
from ddpimg.trackers.settings import TENSORBOARD, TENSORBOARD_DIR, TrackerSettings

EVENT_FILES = "events.out.tfevents.*"
FLUSH_EVERY_S = 30  # bounds what a killed job loses; SummaryWriter's default is 120


class TensorBoardTracker:
    name = TENSORBOARD

    def __init__(self, settings: TrackerSettings, resumed: bool, resume_step: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = settings.out / TENSORBOARD_DIR
        if not resumed:
            remove_event_files(self.log_dir)
        self.writer = SummaryWriter(
            log_dir=str(self.log_dir),
            purge_step=None if resume_step is None else resume_step + 1,
            flush_secs=FLUSH_EVERY_S,
        )

    @classmethod
    def open(
        cls,
        settings: TrackerSettings,
        described: Mapping[str, Any],
        previous: Mapping[str, Any] | None,
        resume_step: int | None,
    ) -> TensorBoardTracker:
        tracker = cls(settings, previous is not None, resume_step)
        if previous is None:
            params = parameters(described)
            table = "\n".join(f"| {key} | {value} |" for key, value in params.items())
            tracker.writer.add_text("config", f"| parameter | value |\n|---|---|\n{table}", 0)
        return tracker

    @property
    def state(self) -> dict[str, Any]:
        return {"log_dir": str(self.log_dir)}

    def log(self, values: Mapping[str, float], step: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def finish(self, status: str, exit_status: int) -> None:
        self.writer.add_text("status", f"{status} (exit status {exit_status})")
        self.writer.close()


def remove_event_files(log_dir: Path) -> None:
    """Remove the event files directly in ``log_dir`` (an earlier run's)."""
    for path in log_dir.glob(EVENT_FILES):
        path.unlink(missing_ok=True)
