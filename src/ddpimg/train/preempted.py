"""The end of a preempted run: what the training loop raises once its checkpoint is written,
and ``run_training`` turns into exit status 75 (``exitcodes.PREEMPTED``)."""

from __future__ import annotations

from pathlib import Path


class Preempted(Exception):
    """Raised by the training loop once the checkpoint of a preempted run is written."""

    def __init__(self, cause: str, step: int, checkpoint: Path) -> None:
        super().__init__(f"{cause}: stopped after step {step}, checkpoint {checkpoint}")
        self.cause = cause
        self.step = step
        self.checkpoint = checkpoint
