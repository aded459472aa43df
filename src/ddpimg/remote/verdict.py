"""What the lines of ``ddpimg follow`` say, from what the login node sent: a train record as
the live line (step, loss, samples/s, time left), an evaluation, how the run ended by its
manifest (completed, preempted after a step with its checkpoint, failed naming the lost rank),
and the job's last log lines.

Everything here is the run's own data, which anyone on the cluster could have written: values
are used only when they have the expected type, and text is printed escaped and cut short.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ddpimg.errors import printable

MAX_TEXT = 300


def text(value: object, limit: int = MAX_TEXT) -> str:
    """A value of the run's as one escaped line of at most ``limit`` characters."""
    said = printable(str(value))
    return said if len(said) <= limit else said[: limit - 3] + "..."


def number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def duration(seconds: float) -> str:
    """``1:02:03`` or ``2:03``."""
    whole = max(int(seconds), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Pace:
    """Time left from the last two train records of one run (their ``elapsed_s`` restart
    with a continued run, so a pair across that start is not used)."""

    def __init__(self) -> None:
        self._last: tuple[int, float] | None = None
        self.seconds_per_step: float | None = None

    def add(self, step: int, elapsed: float | None) -> None:
        if elapsed is None:
            self._last = None
            return
        if self._last is not None:
            before_step, before = self._last
            if step > before_step and elapsed > before:
                self.seconds_per_step = (elapsed - before) / (step - before_step)
        self._last = (step, elapsed)

    def left(self, step: int, total: int | None) -> float | None:
        if total is None or self.seconds_per_step is None or step > total:
            return None
        return (total - step) * self.seconds_per_step


def train_line(record: Mapping[str, Any], total: int | None, left: float | None) -> str:
    """``step 12/40  loss 1.2345  812 samples/s  0:13 left``."""
    step = integer(record.get("step"))
    parts = [f"step {step}" + (f"/{total}" if total else "")]
    loss = number(record.get("loss"))
    if loss is not None:
        parts.append(f"loss {loss:.4f}")
    rate = number(record.get("samples_per_s"))
    if rate is not None:
        parts.append(f"{rate:,.0f} samples/s" if abs(rate) < 1e9 else f"{rate:.3g} samples/s")
    elif (per_s := number(record.get("steps_per_s"))) is not None:
        parts.append(f"{per_s:.2f} steps/s")
    if left is not None:
        parts.append(f"{duration(left)} left")
    return "  ".join(parts)


def eval_line(record: Mapping[str, Any]) -> str:
    parts = ["eval"]
    epoch = integer(record.get("epoch"))
    if epoch is not None:
        parts.append(f"epoch {epoch}")
    loss = number(record.get("loss"))
    if loss is not None:
        parts.append(f"loss {loss:.4f}")
    accuracy = number(record.get("accuracy"))
    if accuracy is not None:
        parts.append(f"accuracy {100 * accuracy:.2f}%")
    return "  ".join(parts)


def summary_words(record: Mapping[str, Any] | None) -> str:
    """``40 steps, final loss 0.2312, eval loss 0.3012, accuracy 91.20%``."""
    if not record:
        return ""
    parts = []
    steps = integer(record.get("steps"))
    if steps is not None:
        parts.append(f"{steps} steps")
    for key, label in (("final_loss", "final loss"), ("eval_loss", "eval loss")):
        value = number(record.get(key))
        if value is not None:
            parts.append(f"{label} {value:.4f}")
    accuracy = number(record.get("eval_accuracy"))
    if accuracy is not None:
        parts.append(f"accuracy {100 * accuracy:.2f}%")
    return ", ".join(parts)


def run_verdict(manifest: Mapping[str, Any] | None, summary: Mapping[str, Any] | None) -> str:
    """How the run ended, by its manifest: ``completed: 40 steps, ...``, ``preempted (USR2)
    after step 12, checkpoint step-00000012: exit 75``, ``failed (exit 5): rank 3 ...``."""
    if manifest is None:
        return "no manifest.json (the run did not start, or its directory is elsewhere)"
    status = text(manifest.get("status"), 40)
    code = integer(manifest.get("exit_status"))
    exit_text = "" if code is None else f" (exit {code})"
    if status == "completed":
        words = summary_words(summary)
        return "completed" + (f": {words}" if words else "")
    if status == "preempted":
        preemption = manifest.get("preemption")
        detail = ""
        if isinstance(preemption, Mapping):
            cause = text(preemption.get("cause"), 60)
            step = integer(preemption.get("step"))
            checkpoint = str(preemption.get("checkpoint") or "")
            name = text(checkpoint.rstrip("/").rsplit("/", 1)[-1], 80) if checkpoint else "none"
            detail = f" ({cause}) after step {step}, checkpoint {name}"
        return f"preempted{detail}{exit_text}"
    error = manifest.get("error")
    first = text(str(error).splitlines()[0]) if isinstance(error, str) and error else ""
    return f"{status}{exit_text}" + (f": {first}" if first else "")


def log_lines(data: bytes, count: int) -> list[str]:
    """The last ``count`` lines of a log's tail, escaped (a terminal's escape sequences in a
    log line are printed as text, never sent to the terminal)."""
    lines = data.decode("utf-8", "replace").splitlines()
    if data and not data.startswith(b"\n"):
        lines = lines[1:] if len(lines) > count else lines  # the first may be cut
    return [text(line.rstrip("\r"), 500) for line in lines[-count:]]


def nodes_words(nodes: str) -> str:
    return f" on {text(nodes, 200)}" if nodes else ""


def reason_words(reason: str, start: str) -> str:
    parts: Sequence[str] = [
        p for p in (reason and f"({text(reason, 100)})", start and f"expected start {start}") if p
    ]
    return (" " + " ".join(parts)) if parts else ""
