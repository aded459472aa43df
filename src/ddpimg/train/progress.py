"""Rank 0's progress report on stderr.

On a terminal: one line redrawn in place (carriage return) at most a few times a second,
showing the step count and the last logged loss. Elsewhere (batch job logs, pipes): one
plain line per log point and per evaluation, nothing in between.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

_REDRAW_S = 0.2


class Progress:
    def __init__(
        self,
        stream: TextIO,
        interactive: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.interactive = stream.isatty() if interactive is None else interactive
        self.clock = clock
        self.total_steps = 0
        self._last_draw = float("-inf")
        self._loss_text = ""
        self._width = 0

    def begin(self, total_steps: int) -> None:
        self.total_steps = total_steps

    def step(self, step: int, epoch: int) -> None:
        """Called after every optimizer step; only redraws the terminal line."""
        if not self.interactive:
            return
        now = self.clock()
        if now - self._last_draw >= _REDRAW_S or step == self.total_steps:
            self._last_draw = now
            self._draw(f"epoch {epoch}  step {step}/{self.total_steps}{self._loss_text}")

    def train(self, step: int, epoch: int, loss: float, samples_per_s: float) -> None:
        """A log point."""
        self._loss_text = f"  loss {loss:.4f}  {samples_per_s:,.0f} samples/s"
        if self.interactive:
            self._draw(f"epoch {epoch}  step {step}/{self.total_steps}{self._loss_text}")
        else:
            self._line(
                f"train epoch {epoch} step {step}/{self.total_steps} loss {loss:.4f} "
                f"samples/s {samples_per_s:.1f}"
            )

    def eval(
        self,
        epoch: int,
        loss: float,
        accuracy: float,
        *,
        samples: int | None = None,
        set_samples: int | None = None,
    ) -> None:
        """An evaluation's line; it says so when it took ``samples`` of a larger set (a
        short run's evaluation)."""
        text = f"eval  epoch {epoch} loss {loss:.4f} accuracy {100 * accuracy:.2f}%"
        if samples is not None and set_samples is not None and samples < set_samples:
            text += (
                f" (eval on {samples:,} of {set_samples:,} samples: the run stops inside its "
                "first epoch; --eval-samples all evaluates them all)"
            )
        self._line(text)

    def close(self) -> None:
        """End a redrawn line so that what follows starts on its own line."""
        if self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0

    def _draw(self, text: str) -> None:
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def _line(self, text: str) -> None:
        self.close()
        self.stream.write(text + "\n")
        self.stream.flush()
