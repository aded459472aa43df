"""The stall watch of one rank: its progress, published to the rendezvous store by a
background thread; the judgement when a collective fails; the backstop when the loop stops
moving; the sentinel process that ends this rank if it stops running altogether.

Threads, and why two: the ticker wakes every heartbeat, feeds the sentinel and checks the
backstop; it never touches the network, so that a store that stopped answering (its host
rank is stopped) cannot silence it. The publisher sends the ticker's latest record to the
store and may block there as long as the store does. Store operations made when something
failed run in a helper thread of their own, bounded in time: TCPStore's client retries past
its own timeout when the server's process is stopped rather than gone.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

from ddpimg import exitcodes
from ddpimg.errors import RankLostError, report
from ddpimg.runtime.interruptible import heeding
from ddpimg.runtime.stall.record import SETUP, ProgressRecord, State, record_key
from ddpimg.runtime.stall.verdict import Verdict, describe, judge

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

    from ddpimg.runtime.store_auth import RecordSeal

T = TypeVar("T")

STARTED_KEY: Final = "ddpimg/stall/started"
# Ranks that found a preemption shared by every rank (``StallWatch.preempted``).
CONFIRMED_KEY: Final = "ddpimg/stall/preemption-confirmed"
# Ranks that failed on their own (``StallWatch.explain``): one counter, so that a rank
# waiting long in one phase can look for such a failure with one store operation.
FAILED_KEY: Final = "ddpimg/stall/failed"
JUDGE_KEY: Final = "ddpimg/stall/judge"
VERDICT_KEY: Final = "ddpimg/stall/verdict"
SENTINEL_SCRIPT: Final = Path(__file__).with_name("sentinel.py")
# How much longer than its own timeout NCCL's watchdog waits (it ends the process without
# a word): ddpimg's backstop must speak first.
NCCL_EXTRA_S: Final = 40.0


@dataclass(frozen=True)
class StallLimits:
    """The times the watch works with, all derived from ``--timeout`` (T).

    ``period_s``: heartbeat (T/20, within 0.5-2 s). ``stale_after_s``: a rank whose last
    report is older is silent (3 heartbeats, at least 2 s). ``store_s``: the bound on one
    store operation after a failure (T/4, within 2.5-5 s). ``grace_s``: what a judgement may
    take after the timeout (two store operations, a report going stale, two heartbeats): 8 s
    at T = 10, 15 s at T = 20, 20 s from T = 40 on. ``backstop_s``: how long the loop may
    stay in one phase before the watch gives up for it: with Gloo T + grace (Gloo's own
    timeout raises in the loop first), with NCCL T (NCCL's watchdog, at T +
    ``NCCL_EXTRA_S``, would end the process silently), and T for a user's script (``script``),
    whose process group has a timeout of its own choosing (transformers: 30 minutes).
    """

    timeout_s: float
    period_s: float
    stale_after_s: float
    store_s: float
    grace_s: float
    backstop_s: float

    @classmethod
    def for_timeout(cls, timeout_s: float, backend: str, *, script: bool = False) -> StallLimits:
        period = min(max(timeout_s / 20, 0.5), 2.0)
        stale_after = max(3 * period, 2.0)
        store_s = min(max(timeout_s / 4, 2.5), 5.0)
        grace = 2 * store_s + stale_after + 2 * period
        backstop = timeout_s if backend == "nccl" or script else timeout_s + grace
        return cls(timeout_s, period, stale_after, store_s, grace, backstop)

    @property
    def sentinel_s(self) -> float:
        """How long this process may not run at all before its sentinel kills it: the
        other ranks have given up on it by then."""
        return self.timeout_s + self.grace_s


class StoreUnanswered(Exception):
    """A store operation did not return within its bound."""


def bounded(call: Callable[[], T], timeout_s: float) -> T:
    """``call()`` in a helper thread; StoreUnanswered if it has not returned in time (the
    thread is left behind: it is a daemon, blocked in the store's client)."""
    deadline = time.monotonic() + timeout_s

    def unanswered() -> None:
        if time.monotonic() >= deadline:
            raise StoreUnanswered(f"no answer within {timeout_s:g} s")

    return heeding(call, unanswered, poll_s=timeout_s)


class Board:
    """The ranks' records in the rendezvous store (one TCPStore client, one lock: the
    client is shared by the publisher thread and the judgement). Once an operation went
    unanswered, the next ones give up at once: the store is not coming back. Every record
    and verdict is sealed with the job's key (``ddpimg.runtime.store_auth``); one that does
    not open is read as absent."""

    def __init__(
        self, store: Store, world_size: int, address: str, op_timeout_s: float, seal: RecordSeal
    ) -> None:
        self.store = store
        self.seal = seal
        self.world_size = world_size
        self.address = address
        self.op_timeout_s = op_timeout_s
        self._lock = threading.Lock()
        self._unanswered = False

    def _call(self, call: Callable[[], T]) -> T:
        def locked() -> T:
            with self._lock:
                return call()

        if self._unanswered:
            raise StoreUnanswered("an earlier operation went unanswered")
        try:
            return bounded(locked, self.op_timeout_s)
        except StoreUnanswered:
            self._unanswered = True
            raise

    def publish(self, record: ProgressRecord, current: Callable[[], bool]) -> None:
        """Unbounded: called by the publisher thread, which may block here. Written only
        while ``current()`` still holds, asked under the client's lock: a final record
        published meanwhile (publish_bounded) is never overwritten by an older one."""
        with self._lock:
            if current():
                self._set(record_key(record.rank), record.to_text())

    def publish_bounded(self, record: ProgressRecord) -> None:
        self._call(lambda: self._set(record_key(record.rank), record.to_text()))

    def _set(self, key: str, text: str) -> None:
        self.store.set(key, self.seal.seal(key, text))

    def _open(self, key: str, value: bytes | None) -> str | None:
        return None if value is None else self.seal.open(key, value)

    def register(self) -> None:
        self._call(lambda: self.store.add(STARTED_KEY, 1))

    def confirm_preemption(self) -> int:
        """Count this rank among those that found the preemption shared; how many have."""
        return self._call(lambda: self.store.add(CONFIRMED_KEY, 1))

    def preemptions_confirmed(self) -> int:
        return self._call(lambda: self.store.add(CONFIRMED_KEY, 0))

    def failed(self, count: int = 0) -> int:
        """Add ``count`` to the ranks that failed on their own; how many have."""
        return self._call(lambda: self.store.add(FAILED_KEY, count))

    def read_all(self) -> dict[int, ProgressRecord | None]:
        """Every rank's record (None for a rank that never published one)."""

        def read() -> dict[int, ProgressRecord | None]:
            keys = [record_key(rank) for rank in range(self.world_size)]
            if self.store.add(STARTED_KEY, 0) >= self.world_size:
                values: list[bytes | None] = list(self.store.multi_get(keys))
            else:  # multi_get would wait for the missing keys
                values = [self.store.get(key) if self.store.check([key]) else None for key in keys]
            texts = [self._open(key, value) for key, value in zip(keys, values, strict=True)]
            return {
                rank: None if text is None else ProgressRecord.from_bytes(text.encode())
                for rank, text in enumerate(texts)
            }

        return self._call(read)

    def elect(self) -> bool:
        """Whether this rank is the first to judge (the others wait for its verdict)."""
        return self._call(lambda: self.store.add(JUDGE_KEY, 1)) == 1

    def post(self, verdict: Verdict) -> None:
        import json

        self._call(lambda: self._set(VERDICT_KEY, json.dumps(verdict.to_json())))

    def wait_verdict(self, timeout_s: float) -> Verdict | None:
        import json

        def wait() -> Verdict | None:
            self.store.wait([VERDICT_KEY], timedelta(seconds=timeout_s))
            text = self._open(VERDICT_KEY, self.store.get(VERDICT_KEY))
            return None if text is None else Verdict.from_json(json.loads(text))

        try:
            return bounded(wait, timeout_s + self.op_timeout_s)
        except (StoreUnanswered, RuntimeError, ValueError):
            return None


class RankProgress:
    """Where this rank's training loop is: (seq, step, phase, since), replaced whole by
    the loop at every phase change (one tuple, so that the watch thread never reads half
    of an update), read by the watch thread. ``since`` is ``time.monotonic()``."""

    __slots__ = ("_checkpoints", "position")

    def __init__(self) -> None:
        self.position: tuple[int, int, str, float] = (0, 0, SETUP, time.monotonic())
        self._checkpoints: tuple[tuple[str, int], ...] = ()

    def saved(self, path: str, step: int) -> None:
        """A checkpoint was written (or resumed from) at ``path``, after ``step`` steps."""
        self._checkpoints = ((path, step), *self._checkpoints[:1])

    @property
    def checkpoint(self) -> tuple[str, int] | None:
        """The newest checkpoint that exists. Rank 0 publishes a checkpoint (renames it to
        its final name) after the others have returned from the save, so the newest may
        be missing when rank 0 stopped in between: then it is the one before."""
        return next((item for item in self._checkpoints if os.path.exists(item[0])), None)

    def enter(self, phase: str, step: int) -> None:
        self.position = (self.position[0] + 1, step, phase, time.monotonic())

    def touch(self) -> None:
        """Progress without a new phase (an evaluation batch)."""
        seq, step, phase, _ = self.position
        self.position = (seq, step, phase, time.monotonic())


class Sentinel:
    """The child process of ``sentinel.py``, fed one byte a heartbeat through a pipe."""

    def __init__(self, limit_s: float, label: str) -> None:
        read_fd, self._fd = os.pipe()
        # A stopped sentinel must not block the heartbeat: a full pipe drops the byte.
        os.set_blocking(self._fd, False)
        argv = [sys.executable, "-I", "-S", str(SENTINEL_SCRIPT), str(read_fd),
                str(os.getpid()), f"{limit_s:g}", label]  # fmt: skip
        self.process = subprocess.Popen(argv, pass_fds=(read_fd,), stdin=subprocess.DEVNULL)
        os.close(read_fd)

    def beat(self) -> None:
        with contextlib.suppress(BlockingIOError, BrokenPipeError):
            os.write(self._fd, b".")

    def close(self) -> None:
        """Close the pipe: the sentinel exits on its own (waited for, bounded)."""
        with contextlib.suppress(OSError):
            os.close(self._fd)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# What the RuntimeErrors of a collective failing under a rank say (Gloo raises plain
# RuntimeErrors, some naming its source files, some not; read from torch 2.14's library).
COLLECTIVE_MARKERS = (
    "gloo/transport",
    "Application timeout caused pair closure",
    "Connection closed by peer",
    "Connection reset by peer",
    "Timed out waiting",
    "NCCL communicator was aborted",
)


def is_collective_failure(err: BaseException) -> bool:
    """Whether ``err`` is, by its type or words, a collective or store failing under this
    rank (a peer is gone or late), as opposed to this rank's own error. torch.distributed
    raises its DistError family; Gloo raises plain RuntimeErrors (``COLLECTIVE_MARKERS``)."""
    import torch.distributed as dist

    if isinstance(err, dist.DistError):
        return True
    return isinstance(err, RuntimeError) and any(mark in str(err) for mark in COLLECTIVE_MARKERS)


# Gloo's words for a peer whose process ended, which differ with the moment it ended
# (mid-read, mid-write, between two operations): one cause, said one way.
PEER_GONE_MARKERS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
PEER_GONE = "gloo: a peer closed its connection"


def short_cause(err: BaseException) -> str:
    """The first line of a backend error without its source location:
    ``gloo: Timed out waiting 20000ms for recv operation to complete``; a peer gone is
    ``PEER_GONE`` whatever words Gloo used."""
    text = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    if "gloo/" in text and any(marker in text for marker in PEER_GONE_MARKERS):
        return PEER_GONE
    backend = "gloo: " if "gloo/" in text else ""
    if text.startswith("[") and "] " in text:
        text = text.split("] ", 1)[1]
    return (backend + text)[:200] or type(err).__name__


class StallWatch:
    """See the package docstring. ``on_fatal`` (rank 0: record the failure in
    manifest.json) runs when the backstop gives up, just before the process ends.

    ``script``: the loop is a user's script, seen only at its optimizer steps and through
    framework callbacks. A phase that every rank shares for longer than the timeout (an
    evaluation without progress calls, a long save) is not a stall there, so the backstop
    gives up only when the ranks' records show a lost rank (failed, silent, never reported,
    or behind the others) or the store stopped answering; otherwise it looks again a stale
    period later. The checkpoints the script writes itself are not known to the watch."""

    def __init__(
        self,
        board: Board,
        *,
        rank: int,
        host: str,
        limits: StallLimits,
        flight_recorder: str | None = None,
        on_fatal: Callable[[RankLostError], None] | None = None,
        sentinel: bool = True,
        script: bool = False,
    ) -> None:
        self.board, self.rank, self.host, self.limits = board, rank, host, limits
        self.script = script
        self._next_look = 0.0  # script: when the backstop may read the records again
        self._next_failure_look = 0.0  # when a stuck loop may look for a failed rank again
        self.flight_recorder = flight_recorder
        self.on_fatal = on_fatal
        self.progress = RankProgress()
        self._state: State = "running"
        self._error = ""
        self._use_sentinel = sentinel
        self._sentinel: Sentinel | None = None
        self._stopped = threading.Event()
        self._publish = threading.Event()
        self._latest: ProgressRecord | None = None
        self._claim = threading.Lock()
        self._claimed = False
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> StallWatch:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.board.register()
        self.board.publish_bounded(self.record())
        if self._use_sentinel:
            label = f"rank {self.rank} on {self.host}"
            self._sentinel = Sentinel(self.limits.sentinel_s, label)
        for name, target in (("ticker", self._tick), ("publisher", self._publish_loop)):
            thread = threading.Thread(target=target, name=f"ddpimg-stall-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """End the threads and the sentinel; a loop that ended well says so in the store."""
        if self._state == "running":
            self._state = "done"
            with contextlib.suppress(StoreUnanswered, RuntimeError):
                self.board.publish_bounded(self.record())
        self._stopped.set()
        self._publish.set()
        for thread in self._threads:
            thread.join(self.limits.period_s + 1)
        if self._sentinel is not None:
            self._sentinel.close()
            self._sentinel = None

    def running(self) -> bool:
        """Whether the loop still runs (its final record not yet published)."""
        return self._state == "running"

    def record(self) -> ProgressRecord:
        seq, step, phase, since = self.progress.position
        now = time.time()
        return ProgressRecord(
            rank=self.rank,
            host=self.host,
            pid=os.getpid(),
            seq=seq,
            step=step,
            phase=phase,
            since=now - (time.monotonic() - since),
            beat=now,
            state=self._state,
            error=self._error,
        )

    def linger(self, limit_s: float, leave: Callable[[], bool] = lambda: False) -> None:
        """Rank 0 hosts the store: before it exits, let the other ranks finish (their records
        say done or failed, or they went silent), bounded by ``limit_s``, so that a rank still
        finishing its own last work does not find the store gone and take that for a loss,
        and a rank that failed as this one did finds this one's error, not a missing store.
        ``leave()`` true (a preemption signal meanwhile) ends the wait at once."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and not leave():
            try:
                records = self.board.read_all()
            except (StoreUnanswered, RuntimeError):
                return
            now = time.time()
            if all(
                record is not None
                and (record.state != "running" or now - record.beat > self.limits.stale_after_s)
                for rank, record in records.items()
                if rank != self.rank
            ):
                return
            time.sleep(self.limits.period_s)

    # -- the threads -----------------------------------------------------------------------

    def _tick(self) -> None:
        period = self.limits.period_s
        woke = resumed = time.monotonic()
        while not self._stopped.wait(period):
            now = time.monotonic()
            if now - woke > 3 * period + 1:
                resumed = now  # the whole process was stopped and continued (suspend)
            woke = now
            if self._sentinel is not None:
                self._sentinel.beat()
            self._latest = self.record()
            self._publish.set()
            _, _, phase, since = self.progress.position
            stuck = now - max(since, resumed)
            running = self._state == "running"
            if running and stuck > self.limits.stale_after_s and now >= self._next_failure_look:
                # Long in one phase: maybe waiting in a collective for a rank that failed on
                # its own. When that rank serves the store (rank 0), this one must read its
                # error before its process, and the store, are gone.
                self._next_failure_look = now + period + self.limits.store_s
                self._backstop(self._give_up_if_failed, f"waiting in phase {phase}")
            # Setup (data sets, model, resume) may take long on every rank at once; its
            # collectives time out by themselves.
            watched = running and phase != SETUP
            if not watched or stuck <= self.limits.backstop_s:
                continue
            cause = (
                f"no progress for {stuck:.0f} s in phase {phase} (--timeout "
                f"{self.limits.timeout_s:g})"
            )
            # Judging takes seconds; the heartbeat goes on meanwhile.
            if not self.script:
                if self._take():
                    self._backstop(self._give_up, cause)
            elif now >= self._next_look:
                self._next_look = now + self.limits.stale_after_s + self.limits.store_s
                self._backstop(self._give_up_if_lost, cause)

    @staticmethod
    def _backstop(target: Callable[[str], None], cause: str) -> None:
        threading.Thread(
            target=target, args=(cause,), name="ddpimg-stall-backstop", daemon=True
        ).start()

    def _publish_loop(self) -> None:
        while True:
            self._publish.wait()
            self._publish.clear()
            record = self._latest
            if self._stopped.is_set() or self._state != "running":
                return
            if record is not None:
                with contextlib.suppress(RuntimeError):  # the store went away
                    self.board.publish(record, self.running)

    # -- when something failed -------------------------------------------------------------

    def _take(self) -> bool:
        """The right to report, once: the loop's exception and the backstop may race."""
        with self._claim:
            taken, self._claimed = not self._claimed, True
            return taken

    def _finish(self, state: State, error: str = "") -> None:
        """Publish how this rank's loop ended (best effort, bounded) and stop publishing."""
        self._state, self._error = state, error
        with contextlib.suppress(StoreUnanswered, RuntimeError):
            self.board.publish_bounded(self.record())

    def explain(self, err: BaseException) -> RankLostError | None:
        """Called by the loop with the exception that ended it. A collective failure
        becomes the RankLostError naming who the ranks waited for; this rank's own error is
        published for the others to name (None: raise it as it is)."""
        if not (is_collective_failure(err) or self._someone_else_lost(err)):
            self._finish("failed", f"{type(err).__name__}: {short_cause(err)}")
            with contextlib.suppress(StoreUnanswered, RuntimeError):
                self.board.failed(1)
            return None
        if not self._take():
            # The backstop is reporting and will end the process: leave it the last word.
            time.sleep(self.limits.grace_s + self.limits.store_s)
            return None
        return self._lost(self._verdict(), short_cause(err))

    def preempted(self, cause: str) -> RankLostError | None:
        """This rank stops for a preemption signal (``cause``: "SIGTERM") that nothing in it
        acted on (a script without a consumer, ``ddpimg.script.runtime``). A preemption is
        the scheduler's signal to every rank; a signal that reaches only the survivors of a
        rank that died is the launcher stopping them (torch's agent, ``srun -K``,
        ``mpirun``): that run lost a rank. So this rank says "preempted" in its record and
        reads the others' until every one is preempted or ended (None: a preemption) or
        the verdict names a rank failed, silent or never heard of (the RankLostError to
        end with); at most until a rank that died has gone silent. Rank 0 then serves the
        store until the others have read their answer (bounded)."""
        self._finish("preempted")
        limits = self.limits
        bound = limits.stale_after_s + 2 * limits.period_s + limits.store_s
        deadline = time.monotonic() + bound
        while True:
            try:
                records = self.board.read_all()
            except (StoreUnanswered, RuntimeError):
                return self._lost_for(self._store_verdict(), cause)
            records[self.rank] = self.record()
            verdict = judge(
                records, self.board.world_size, time.time(), limits.stale_after_s, self.rank
            )
            if any(item.how != "behind" for item in verdict.lost):
                return self._lost_for(verdict, cause)
            ended = [
                record is not None and record.state != "running" for record in records.values()
            ]
            if all(ended) or time.monotonic() >= deadline:
                break
            time.sleep(limits.period_s / 2)
        with contextlib.suppress(StoreUnanswered, RuntimeError):
            self.board.confirm_preemption()
            while self.rank == 0 and time.monotonic() < deadline + bound:
                if self.board.preemptions_confirmed() >= self.board.world_size:
                    break
                time.sleep(limits.period_s / 2)
        return None

    def _lost_for(self, verdict: Verdict, cause: str) -> RankLostError | None:
        """The RankLostError of ``verdict`` unless the backstop is reporting already (it
        ends the process itself: None after waiting for it)."""
        if not self._take():
            time.sleep(self.limits.grace_s + self.limits.store_s)
            return None
        return self._lost(verdict, f"{cause}, sent to the survivors of a lost rank: no preemption")

    def _store_verdict(self) -> Verdict:
        return Verdict(
            self.rank,
            time.time(),
            store=self.board.address,
            store_timeout_s=self.board.op_timeout_s,
        )

    def _someone_else_lost(self, err: BaseException) -> bool:
        """For a RuntimeError of words the markers do not know: whether another rank is
        already seen failed or silent (or the store is gone), which makes it a collective
        failing under this rank. One read, no waiting."""
        if not isinstance(err, RuntimeError):
            return False
        try:
            records = self.board.read_all()
        except (StoreUnanswered, RuntimeError):
            return True
        records[self.rank] = self.record()
        verdict = judge(
            records, self.board.world_size, time.time(), self.limits.stale_after_s, self.rank
        )
        lost = [item for item in verdict.lost if item.how in ("failed", "silent")]
        # The same error on the failed ranks as here (a script's bug hits every rank alike):
        # this rank's own error, not a peer's failure reaching it.
        own = f"{type(err).__name__}: {short_cause(err)}"
        return any(item.how == "silent" or item.error != own for item in lost)

    def _give_up_if_failed(self, cause: str) -> None:
        """The failure look (one store operation): if some rank failed on its own and the
        records say every rank the others wait for failed so, give up for it now, as a
        failed run (exit status 1): a collective waiting for it would end only when its
        process does, and with it, when it is rank 0, the store that holds its error."""
        try:
            if not self.board.failed():
                return
            records = self.board.read_all()
        except (StoreUnanswered, RuntimeError):
            return  # a store gone is the explain's and the backstop's to name
        records[self.rank] = self.record()
        verdict = judge(
            records, self.board.world_size, time.time(), self.limits.stale_after_s, self.rank
        )
        if verdict.raised and self._take():
            self._give_up(cause)

    def _give_up_if_lost(self, cause: str) -> None:
        """The script backstop: give up if a rank is lost or the store went silent; a phase
        every rank shares is left alone (looked at again later)."""
        try:
            records = self.board.read_all()
        except (StoreUnanswered, RuntimeError):
            lost = True
        else:
            records[self.rank] = self.record()
            verdict = judge(
                records, self.board.world_size, time.time(), self.limits.stale_after_s, self.rank
            )
            lost = bool(verdict.lost)
        if lost and self._take():
            self._give_up(cause)

    def _give_up(self, cause: str) -> None:
        """The backstop: report, record, dump NCCL's flight recorder, end the process."""
        from ddpimg.runtime.flight_recorder import dump_now

        verdict = self._verdict()
        if self.flight_recorder is not None:
            dump_now(self.rank, os.environ)
        error = self._lost(verdict, cause)
        report(error)
        if self.on_fatal is not None:
            with contextlib.suppress(Exception):  # the exit status matters more
                self.on_fatal(error)
        sys.stdout.flush()
        os._exit(exitcodes.for_error(error))

    def _lost(self, verdict: Verdict, cause: str) -> RankLostError:
        self._finish("gave_up")
        checkpoint = self.progress.checkpoint
        message, hint = describe(
            verdict,
            observer=self.rank,
            host=self.host,
            step=self.progress.position[1],
            cause=cause,
            now=time.time(),
            checkpoint=checkpoint,
            flight_recorder=self.flight_recorder,
            script=self.script,
        )
        details = verdict.to_json() | {
            "hosts": verdict.hosts,
            "ranks": [lost.rank for lost in verdict.lost],
            "checkpoint": None if checkpoint is None else checkpoint[0],
        }
        return RankLostError(message, hint=hint, details=details, raised=verdict.raised)

    def _verdict(self) -> Verdict:
        """The shared verdict: the first rank to judge posts it, the others read it."""
        limits = self.limits
        try:
            if self.board.elect():
                verdict = self._judge()
                self.board.post(verdict)
                return verdict
            posted = self.board.wait_verdict(limits.stale_after_s + limits.period_s + 2)
            return posted if posted is not None else self._judge()
        except (StoreUnanswered, RuntimeError):
            return self._store_verdict()

    def _judge(self) -> Verdict:
        """Read the records until someone failed or went silent, at most until a report
        has had time to go stale; then judge what is there."""
        limits = self.limits
        deadline = time.monotonic() + limits.stale_after_s + limits.period_s
        while True:
            records = self.board.read_all()
            records[self.rank] = self.record()
            now = time.time()
            verdict = judge(records, self.board.world_size, now, limits.stale_after_s, self.rank)
            if any(lost.how != "behind" for lost in verdict.lost):
                return verdict
            if time.monotonic() >= deadline:
                return verdict
            time.sleep(limits.period_s / 2)
