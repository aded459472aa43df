"""metrics.jsonl read a piece at a time: only complete lines, no record twice, whether the file
grows, is rewritten with the same start (a resumed run), shrinks (a script that went back to
an earlier checkpoint), or the reads fail in between (a dropped connection)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ddpimg.remote import metrics_tail
from ddpimg.remote.metrics_tail import MetricsTail


class File:
    """A remote file as the reader sees it; ``fail`` makes the next read raise."""

    def __init__(self) -> None:
        self.data = b""
        self.fail = False
        self.reads = 0

    def __call__(self, start: int, limit: int) -> bytes | None:
        self.reads += 1
        if self.fail:
            self.fail = False
            raise ConnectionError("dropped")
        return self.data[start : start + limit] if self.data else None


def train(step: int, loss: float | None = None) -> bytes:
    return json.dumps({"kind": "train", "step": step, "loss": loss or 1.0 / step}).encode() + b"\n"


def steps(records: list[dict[str, Any]]) -> list[Any]:
    return [(r["kind"], r.get("step")) for r in records]


def test_complete_lines_only_and_each_once() -> None:
    tail, file = MetricsTail(), File()
    assert tail.read(file) == []
    file.data = train(1) + train(2)[:5]
    assert steps(tail.read(file)) == [("train", 1)]
    file.data = train(1) + train(2) + b'{"kind": "eval", "epoch": 1}\n'
    assert steps(tail.read(file)) == [("train", 2), ("eval", None)]
    assert tail.read(file) == []


def test_a_line_nested_too_deep_is_passed_over() -> None:
    """The login node's file is not trusted: a line nested 30,000 deep (under MAX_LINE) was
    a RecursionError out of follow."""
    tail, file = MetricsTail(), File()
    file.data = train(1) + b"[" * 30_000 + b"]" * 30_000 + b"\n" + train(2)
    assert steps(tail.read(file)) == [("train", 1), ("train", 2)]


def test_a_read_that_fails_changes_nothing() -> None:
    tail, file = MetricsTail(), File()
    file.data = train(1)
    tail.read(file)
    file.data += train(2)
    file.fail = True
    with pytest.raises(ConnectionError):
        tail.read(file)
    assert steps(tail.read(file)) == [("train", 2)]


def test_rewritten_with_the_same_start_goes_on_shrunk_is_read_again_without_repeats() -> None:
    tail, file = MetricsTail(), File()
    file.data = train(1) + train(2) + train(3)
    tail.read(file)
    file.data = train(1) + train(2) + train(3) + train(4)  # a resumed run: same lines, then more
    assert steps(tail.read(file)) == [("train", 4)]
    assert tail.rewrites == 0
    file.data = train(1) + train(2) + train(3, 9.0) + train(4, 9.0) + train(5)  # went back to 2
    assert steps(tail.read(file)) == [("train", 5)]
    assert tail.rewrites == 1
    file.data = train(1)  # shrunk below what was read
    assert tail.read(file) == []


def test_what_is_not_a_record_is_skipped() -> None:
    tail, file = MetricsTail(), File()
    long = json.dumps({"kind": "eval", "x": "a" * metrics_tail.MAX_LINE}).encode() + b"\n"
    file.data = b"not json\n[1, 2]\n" + long + b'{"kind": "train", "step": "3"}\n' + train(1)
    file.data += b'{"kind": "train", "step": true}\n{"kind": "summary"}\n{"kind": "summary"}\n'
    assert steps(tail.read(file)) == [("train", 1), ("summary", None)]


def test_a_large_file_is_caught_up_over_several_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_tail, "PIECE", 100)
    monkeypatch.setattr(metrics_tail, "MAX_PIECES", 3)
    tail, file = MetricsTail(), File()
    file.data = b"".join(train(step) for step in range(1, 21))
    first = steps(tail.read(file))
    assert 0 < len(first) < 20
    rest = steps(tail.read(file))
    while more := steps(tail.read(file)):
        rest += more
    assert first + rest == [("train", step) for step in range(1, 21)]
