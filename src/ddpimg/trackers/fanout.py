"""``Trackers``: rank 0's trackers behind one queue and one thread of their own.

The training loop only enqueues a record (no I/O, no wait): a tracker that is slow, or
whose server has gone (MLflow's client retries for minutes), never holds up a step. A
tracker that fails is warned about once and gets nothing more; the others go on, and
``metrics.jsonl``, written before any tracker sees a record, stays the record of truth.
When the queue is full (a tracker stuck) records are dropped for the trackers, with one
warning. ``finish`` waits a bounded time for the queue to drain.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TextIO

from ddpimg.trackers.records import scalars

QUEUE_RECORDS = 10_000
# How long the end of a run waits for the trackers: a preempted job has the seconds between
# its signal and the batch system's kill, and the checkpoint has taken some of them.
FINISH_TIMEOUT_S = 30.0


class Tracker(Protocol):
    """One tracker's run, open. Its methods run on the trackers' thread only."""

    name: str

    @property
    def state(self) -> Mapping[str, Any]:
        """What a resumed run needs to continue this run (``--out/trackers.json``)."""
        ...

    def log(self, values: Mapping[str, float], step: int) -> None: ...

    def finish(self, status: str, exit_status: int) -> None: ...


class _Finish:
    def __init__(self, status: str, exit_status: int) -> None:
        self.status, self.exit_status = status, exit_status


class Trackers:
    """Feeds every record to ``trackers`` from a daemon thread; warnings go to ``stream``."""

    def __init__(
        self, trackers: Sequence[Tracker], stream: TextIO, capacity: int = QUEUE_RECORDS
    ) -> None:
        self.trackers = list(trackers)
        self.stream = stream
        self.failed: dict[str, str] = {}  # tracker name -> why it stopped
        self._step = 0
        self._dropped = 0
        self._queue: queue.Queue[Mapping[str, Any] | _Finish] = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._feed, name="ddpimg-trackers", daemon=True)
        if self.trackers:
            self._thread.start()

    @property
    def names(self) -> list[str]:
        return [tracker.name for tracker in self.trackers]

    def record(self, record: Mapping[str, Any]) -> None:
        """Hand a metrics.jsonl record on; returns at once."""
        if not self.trackers:
            return
        try:
            self._queue.put_nowait(dict(record))
        except queue.Full:
            self._dropped += 1
            if self._dropped == 1:
                self._warn(
                    f"the trackers ({', '.join(self.names)}) fall behind: records are dropped "
                    "for them until they catch up (metrics.jsonl has every record)"
                )

    def finish(self, status: str, exit_status: int, timeout_s: float = FINISH_TIMEOUT_S) -> None:
        """End every tracker's run with the run's ``status`` (manifest.json's) after the
        records queued so far; waits at most ``timeout_s``."""
        if not self.trackers:
            return
        try:
            self._queue.put(_Finish(status, exit_status), timeout=timeout_s)
        except queue.Full:
            self._warn(f"the trackers did not take the end of the run within {timeout_s:.0f} s")
            return
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._warn(
                f"the trackers did not finish within {timeout_s:.0f} s; their runs may "
                "lack the last records (metrics.jsonl has them)"
            )

    def _feed(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, _Finish):
                for tracker in self._active():
                    self._call(
                        tracker, "finishing the run", tracker.finish, item.status, item.exit_status
                    )
                return
            step, values = scalars(item)
            if step is None:
                step = self._step
            self._step = step
            if values:
                for tracker in self._active():
                    self._call(tracker, f"at step {step}", tracker.log, values, step)

    def _active(self) -> list[Tracker]:
        return [tracker for tracker in self.trackers if tracker.name not in self.failed]

    def _call(self, tracker: Tracker, when: str, method: Any, *args: Any) -> None:
        try:
            method(*args)
        except Exception as err:  # any failure of a tracker ends only that tracker
            self.failed[tracker.name] = f"{type(err).__name__}: {err}"
            self._warn(
                f"tracker {tracker.name} failed {when} ({type(err).__name__}: {err}); it gets "
                "no further records, training goes on and metrics.jsonl has every record"
            )

    def _warn(self, message: str) -> None:
        print(f"ddpimg: warning: {message}", file=self.stream, flush=True)
