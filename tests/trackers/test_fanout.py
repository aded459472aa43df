"""The fan-out's contract with the training loop, with trackers written for the test (the
tracker protocol is ddpimg's own): records arrive in order at their steps, a failing
tracker is warned about once and dropped while the others go on, a stuck one never holds
up ``record`` and bounds ``finish``."""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Mapping

from ddpimg.trackers.fanout import Trackers


class Kept:
    def __init__(self, name: str = "kept", fail_at: int | None = None) -> None:
        self.name, self.fail_at = name, fail_at
        self.logged: list[tuple[int, dict[str, float]]] = []
        self.ended: tuple[str, int] | None = None

    def log(self, values: Mapping[str, float], step: int) -> None:
        if step == self.fail_at:
            raise OSError(28, "No space left on device")
        self.logged.append((step, dict(values)))

    def finish(self, status: str, exit_status: int) -> None:
        self.ended = (status, exit_status)


class Stuck(Kept):
    def __init__(self, release: threading.Event) -> None:
        super().__init__("stuck")
        self.release = release

    def log(self, values: Mapping[str, float], step: int) -> None:
        self.release.wait(60)


def test_records_arrive_at_their_steps_and_the_end_is_passed_on() -> None:
    kept = Kept()
    trackers = Trackers([kept], io.StringIO())
    trackers.record({"kind": "train", "step": 5, "loss": 1.5})
    trackers.record({"kind": "eval", "epoch": 1, "accuracy": 0.5})  # no step: the last one
    trackers.record({"kind": "summary", "steps": 6, "final_loss": 1.0})
    trackers.finish("completed", 0)
    assert kept.logged == [
        (5, {"train/loss": 1.5}),
        (5, {"eval/epoch": 1.0, "eval/accuracy": 0.5}),
        (6, {"summary/steps": 6.0, "summary/final_loss": 1.0}),
    ]
    assert kept.ended == ("completed", 0)


def test_a_failing_tracker_warns_once_and_the_others_go_on() -> None:
    stream = io.StringIO()
    failing, kept = Kept("mlflow", fail_at=2), Kept()
    trackers = Trackers([failing, kept], stream)
    for step in range(1, 5):
        trackers.record({"kind": "train", "step": step, "loss": 1.0})
    trackers.finish("completed", 0)
    assert [step for step, _ in failing.logged] == [1]
    assert failing.ended is None
    assert [step for step, _ in kept.logged] == [1, 2, 3, 4]
    assert kept.ended == ("completed", 0)
    warnings = stream.getvalue().splitlines()
    assert len(warnings) == 1
    assert warnings[0].startswith("ddpimg: warning: tracker mlflow failed at step 2 (OSError")
    assert "training goes on" in warnings[0]
    assert trackers.failed == {"mlflow": "OSError: [Errno 28] No space left on device"}


def test_a_stuck_tracker_never_blocks_the_loop_and_bounds_finish() -> None:
    stream = io.StringIO()
    release = threading.Event()
    trackers = Trackers([Stuck(release)], stream, capacity=2)
    for step in range(1, 10):  # returns at once though the tracker takes nothing
        trackers.record({"kind": "train", "step": step, "loss": 1.0})
    trackers.finish("completed", 0, timeout_s=0.2)
    release.set()
    text = stream.getvalue()
    assert text.count("fall behind: records are dropped") == 1
    # Either the queue was still full or the tracker did not return: both are bounded.
    assert re.search(r"the trackers did not (take the end of the run|finish) within 0 s", text)


def test_no_tracker_no_thread() -> None:
    trackers = Trackers([], io.StringIO())
    trackers.record({"kind": "train", "step": 1, "loss": 1.0})
    trackers.finish("completed", 0)
    assert not trackers._thread.is_alive()
    assert trackers._queue.empty()
