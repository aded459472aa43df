"""A progress display for long offline work (``ddpimg data pack``, ``ddpimg data tokenize``)
on stderr: on a terminal one line redrawn in place, at most a few times a second, with the
count, the rate and the time left; elsewhere (batch job logs, pipes) a plain line every
``LOG_EVERY_S`` seconds and at the end, so that logs stay short."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

REDRAW_S = 0.2
LOG_EVERY_S = 30.0


def _duration(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"


class ProgressBar:
    """``advance(n)`` after each piece of work; ``close()`` at the end."""

    def __init__(
        self,
        label: str,
        total: int,
        unit: str,
        stream: TextIO,
        *,
        done: int = 0,
        interactive: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``done``: work finished before this run (a resumed job), not counted in the rate."""
        self.label, self.total, self.unit, self.stream = label, total, unit, stream
        self.interactive = stream.isatty() if interactive is None else interactive
        self.clock = clock
        self.done = done
        self._started_at, self._started_with = clock(), done
        self._last_draw = float("-inf")
        self._width = 0

    def advance(self, count: int) -> None:
        self.done += count
        now = self.clock()
        interval = REDRAW_S if self.interactive else LOG_EVERY_S
        if now - self._last_draw >= interval or self.done >= self.total:
            self._last_draw = now
            self._show(self.text(now))

    def text(self, now: float) -> str:
        elapsed = now - self._started_at
        rate = (self.done - self._started_with) / elapsed if elapsed > 0 else 0.0
        percent = 100.0 * self.done / self.total if self.total else 100.0
        text = f"{self.label}: {self.done:,}/{self.total:,} {self.unit} ({percent:.0f}%)"
        if rate > 0:
            text += f", {rate:,.0f} {self.unit}/s"
            if self.done < self.total:
                text += f", {_duration((self.total - self.done) / rate)} left"
        return text

    def close(self) -> None:
        """Show the final count (once) and end the line."""
        if self.done < self.total or self._last_draw == float("-inf"):
            self._show(self.text(self.clock()))
        if self.interactive and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0

    def _show(self, text: str) -> None:
        if self.interactive:
            self.stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
