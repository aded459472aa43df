"""What one rank publishes about itself: where its training loop is (step, phase, since
when), when it last reported, and how it ended. Pure: no torch, no store.

Phases, in the order a step goes through them: ``data`` (waiting for this rank's slice of
the batch), ``forward``, ``backward`` (DDP and FSDP all-reduce or reduce-scatter the
gradients inside it), ``optimizer`` (ZeRO and FSDP communicate here too), ``collective``
(the loss all-reduce of a log step, the preemption agreement, the evaluation's sums),
``checkpoint``, ``eval`` (evaluation batches). ``setup`` precedes the first step. A user's
script (``ddpimg.script``) is seen only at its optimizer steps: ``train`` is all it does
between two of them (its data, forward and backward), ``optimizer`` the step itself.

``seq`` counts the phases a rank has entered since the loop started. Every rank runs the
same control flow (the same steps log, checkpoint and evaluate), so equal ``seq`` means the
same point of the run, and the rank with the lowest ``seq`` is the one the others wait for.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Final, Literal

SETUP: Final = "setup"
DATA: Final = "data"
FORWARD: Final = "forward"
BACKWARD: Final = "backward"
OPTIMIZER: Final = "optimizer"
COLLECTIVE: Final = "collective"
CHECKPOINT: Final = "checkpoint"
EVAL: Final = "eval"
TRAIN: Final = "train"

# How a rank's loop ended; "running" while it goes on. "preempted": a preemption signal
# ended it and it waits to learn whether every other rank stopped for it too.
State = Literal["running", "failed", "gave_up", "done", "preempted"]

KEY_PREFIX = "ddpimg/progress/"


def record_key(rank: int) -> str:
    """The store key under which ``rank`` publishes its record."""
    return f"{KEY_PREFIX}{rank}"


@dataclass(frozen=True)
class ProgressRecord:
    """One rank's last report. Times are wall-clock seconds (``time.time()``) of the
    publishing host: the nodes of a cluster keep their clocks in step (NTP), and the
    differences that matter here are seconds."""

    rank: int
    host: str
    pid: int
    seq: int
    step: int
    phase: str
    since: float  # when the rank entered ``phase``
    beat: float  # when it published this record
    state: State = "running"
    error: str = ""  # its own failure, for state "failed"

    def to_text(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_bytes(cls, data: bytes) -> ProgressRecord | None:
        """The record, or None for bytes that are not one (a foreign or damaged value)."""
        try:
            fields = json.loads(data)
            return cls(**fields) if isinstance(fields, dict) else None
        except (ValueError, TypeError):
            return None
