"""``metrics.jsonl`` on the login node, read a piece at a time with no line shown twice.

Each read asks for the file from where the last one stopped, starting a little before it
(the ``anchor``: the end of what was read). If the file no longer holds those bytes there, it
was rewritten (a resumed run keeps the lines up to its checkpoint and rewrites the file; a
script's run drops the lines after the step it resumed from), and the file is read again
from its start. Either way a record is passed on only if it is new: a train line of a step
after the last one passed on, an evaluation not passed on before, one summary. A dropped
connection changes nothing: the next read starts where the last complete line ended.

Lines are the run's own JSON objects, read as data: a line that is not a JSON object, or too
long, is skipped; a piece is at most ``PIECE`` bytes, so a file growing faster than it is read
is caught up over several reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddpimg.untrusted import parse_json

ANCHOR = 64
PIECE = 1 << 20
MAX_LINE = 64 << 10
MAX_PIECES = 16  # a poll reads at most this many pieces; the rest at the next one

# (start, limit) -> the bytes of the file from ``start``, at most ``limit``; None: no file.
Reader = Callable[[int, int], bytes | None]


@dataclass
class MetricsTail:
    """Where reading stopped (``offset``: after the last complete line) and what was passed
    on (the last train step, the evaluations, the summary)."""

    offset: int = 0
    anchor: bytes = b""
    last_step: int | None = None
    evals: set[tuple[Any, ...]] = field(default_factory=set)
    summary_seen: bool = False
    rewrites: int = 0

    def read(self, reader: Reader) -> list[dict[str, Any]]:
        """The new records, read through ``reader``."""
        records: list[dict[str, Any]] = []
        for _ in range(MAX_PIECES):
            start = self.offset - len(self.anchor)
            data = reader(start, PIECE + len(self.anchor))
            if data is None:
                return records
            if not data.startswith(self.anchor):
                # Rewritten: read it again from the start; the checks below drop what was seen.
                self.offset, self.anchor = 0, b""
                self.rewrites += 1
                continue
            piece = data[len(self.anchor) :]
            end = piece.rfind(b"\n") + 1
            if end == 0 and len(piece) >= PIECE:
                end = len(piece)  # one line longer than a piece: skipped whole
            consumed = piece[:end]
            records += self._new(consumed)
            self.offset += len(consumed)
            self.anchor = (self.anchor + consumed)[-ANCHOR:]
            if len(piece) < PIECE:
                return records
        return records

    def _new(self, chunk: bytes) -> list[dict[str, Any]]:
        found = []
        for line in chunk.split(b"\n"):
            if not line.strip() or len(line) > MAX_LINE:
                continue
            try:
                record = parse_json(line)
            except ValueError:  # untrusted.BadInput too: nested too deep, a number too long
                continue
            if isinstance(record, dict) and self._is_new(record):
                found.append(record)
        return found

    def _is_new(self, record: dict[str, Any]) -> bool:
        kind = record.get("kind")
        step = record.get("step")
        if kind == "train":
            if not isinstance(step, int) or isinstance(step, bool):
                return False
            if self.last_step is not None and step <= self.last_step:
                return False
            self.last_step = step
            return True
        if kind == "eval":
            key = (repr(record.get("epoch")), repr(step))
            if key in self.evals:
                return False
            self.evals.add(key)
            return True
        if kind == "summary":
            if self.summary_seen:
                return False
            self.summary_seen = True
            return True
        return False
