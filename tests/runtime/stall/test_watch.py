"""The watch against a real TCPStore: two ranks' watches in this process (no sentinel), one
of them made silent, failing or stuck; the store made to stop answering; the backstop in a
process of its own."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from torch.distributed import TCPStore  # type: ignore[attr-defined]  # public re-export

from ddpimg import exitcodes
from ddpimg.runtime.stall import record as phases
from ddpimg.runtime.stall import watch as watch_module
from ddpimg.runtime.stall.watch import (
    Board,
    StallLimits,
    StallWatch,
    StoreUnanswered,
    bounded,
    is_collective_failure,
    short_cause,
)
from ddpimg.runtime.store_auth import RecordSeal
from tests.forwarder import Forwarder

GLOO_TIMEOUT = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed "
    "out waiting 2000ms for recv operation to complete"
)
# The job's key of these tests' records.
SEAL = RecordSeal(b"k" * 32)
# A heartbeat of 0.5 s, silent after 2 s.
LIMITS = StallLimits.for_timeout(2.0, "gloo")


def _watch(port: int, rank: int) -> StallWatch:
    client = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=5))
    board = Board(client, 2, f"127.0.0.1:{port}", LIMITS.store_s, SEAL)
    return StallWatch(board, rank=rank, host=f"host{rank}", limits=LIMITS, sentinel=False)


@pytest.fixture
def port() -> Iterator[int]:
    """A TCPStore server, as rank 0 hosts it, on a port the kernel chose (no other process
    can take it between its choice and the bind)."""
    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    yield server.port
    del server


@pytest.fixture
def two(port: int) -> Iterator[tuple[StallWatch, StallWatch]]:
    watches = (_watch(port, 0), _watch(port, 1))
    for watch in watches:
        watch.start()
    yield watches
    for watch in watches:
        watch.stop()


def _silent(port: int, rank: int, *path: str) -> StallWatch:
    """A rank that reported once, at ``path``'s last phase, and then no more (its process
    stopped): its watch is never started."""
    watch = _watch(port, rank)
    _at(watch, 3, *path)
    watch.board.register()
    watch.board.publish_bounded(watch.record())
    return watch


def _at(watch: StallWatch, step: int, *path: str) -> None:
    for phase in path:
        watch.progress.enter(phase, step)


def test_a_heartbeat_taken_before_the_end_does_not_replace_the_final_record(port: int) -> None:
    """The publisher thread may hold a "running" record while the loop ends: published
    after the final one, it would make a rank that finished look silent later."""
    watch = _watch(port, 1)
    _at(watch, 3, phases.FORWARD)
    heartbeat = watch.record()
    watch.start()
    watch.stop()
    watch.board.publish(heartbeat, watch.running)
    final = watch.board.read_all()[1]
    assert final is not None
    assert (final.state, final.step) == ("done", 3)


def test_limits_follow_the_timeout() -> None:
    assert StallLimits.for_timeout(600, "gloo") == StallLimits(600, 2.0, 6.0, 5.0, 20.0, 620)
    assert StallLimits.for_timeout(20, "gloo") == StallLimits(20, 1.0, 3.0, 5.0, 15.0, 35)
    assert StallLimits.for_timeout(10, "gloo") == StallLimits(10, 0.5, 2.0, 2.5, 8.0, 18)
    # the bound docs/checkpoints-and-failures.md states: every process gone within --timeout + 20 s
    assert all(StallLimits.for_timeout(t, "gloo").grace_s <= 20 for t in (1, 10, 60, 3600))
    # NCCL: the watch gives up at the timeout, before NCCL's silent watchdog
    assert StallLimits.for_timeout(600, "nccl").backstop_s == 600


def test_a_silent_rank_is_named_by_the_other(port: int) -> None:
    victim = _silent(port, 1, phases.DATA, phases.FORWARD)
    with _watch(port, 0) as waiter:
        _at(waiter, 3, phases.DATA, phases.FORWARD, phases.BACKWARD)
        waiter.progress.saved("/nonexistent", 2)  # not published: not named
        time.sleep(LIMITS.stale_after_s + 0.5)
        began = time.monotonic()
        lost = waiter.explain(RuntimeError(GLOO_TIMEOUT))
        # Already stale: no wait (one would last stale_after_s; this takes milliseconds).
        assert time.monotonic() - began < LIMITS.stale_after_s / 2
    assert lost is not None
    assert lost.message.startswith(
        "rank 0 (host0) gave up at step 3 (gloo: Timed out waiting 2000ms for recv operation "
        f"to complete): rank 1 (host host1, pid {victim.record().pid}) stopped reporting "
    )
    assert "s ago (last report: step 3, phase forward); no checkpoint" in lost.message
    assert lost.details["ranks"] == [1]
    assert lost.details["hosts"] == ["host1"]
    assert exitcodes.for_error(lost) == exitcodes.RANK_LOST


def test_a_rank_that_failed_on_its_own_is_named_with_its_error(
    two: tuple[StallWatch, StallWatch],
) -> None:
    waiter, failing = two
    _at(failing, 5, phases.DATA, phases.FORWARD)
    _at(waiter, 5, phases.DATA, phases.FORWARD, phases.BACKWARD)
    assert failing.explain(ValueError("bad batch shape")) is None  # its own error: raised as is
    lost = waiter.explain(RuntimeError(GLOO_TIMEOUT.replace("Timed out", "Connection closed")))
    assert lost is not None
    assert "rank 1 (host host1, pid " in lost.message
    assert ") failed at step 5 in phase forward: ValueError: bad batch shape" in lost.message
    assert "own error is in its log (on host1)" in (lost.hint or "")
    # Its own error, not a lost rank: the survivor exits as a failed run, and is not
    # requeued (issue 47).
    assert lost.raised
    assert exitcodes.for_error(lost) == exitcodes.TRAINING_FAILED


def test_the_same_error_on_every_rank_is_each_ranks_own(
    two: tuple[StallWatch, StallWatch],
) -> None:
    """A script's bug raises the same error on every rank (nanoGPT without CUDA): the rank
    that fails second is not the first one's victim, whose failure it reads in the store."""
    second, first = two
    error = "Found no NVIDIA driver on your system"
    assert first.explain(RuntimeError(error)) is None
    assert second.explain(RuntimeError(error)) is None  # its own: raised as is
    # Another error of words the markers do not know, beside a failed rank: a peer's
    # failure reaching this one.
    other = second.explain(RuntimeError("something else broke"))
    assert other is not None
    assert exitcodes.for_error(other) == exitcodes.TRAINING_FAILED


def test_a_rank_stuck_behind_while_reporting_is_named(
    two: tuple[StallWatch, StallWatch],
) -> None:
    waiter, stuck = two
    _at(stuck, 8, phases.DATA)
    _at(waiter, 8, phases.DATA, phases.FORWARD, phases.BACKWARD)
    began = time.monotonic()
    lost = waiter.explain(RuntimeError(GLOO_TIMEOUT))
    assert lost is not None
    # nobody silent: it waited for reports to go stale before settling for "behind"
    assert time.monotonic() - began >= LIMITS.stale_after_s
    assert "rank 1 (host host1, pid " in lost.message
    assert "still reports, but is stuck at step 8 in phase data for" in lost.message


def test_both_survivors_name_the_same_rank(two: tuple[StallWatch, StallWatch]) -> None:
    """The first to judge posts the verdict; the second reads it instead of judging."""
    first, second = two
    _at(first, 2, phases.DATA, phases.FORWARD)
    _at(second, 2, phases.DATA)
    verdict_first = first.explain(RuntimeError(GLOO_TIMEOUT))
    verdict_second = second.explain(RuntimeError(GLOO_TIMEOUT))
    assert verdict_first is not None
    assert verdict_second is not None
    assert verdict_first.details == verdict_second.details
    assert verdict_first.details["ranks"] == [1]


@pytest.mark.parametrize(
    ("err", "collective"),
    [
        (RuntimeError(GLOO_TIMEOUT), True),
        (RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer"), True),
        # what Gloo said between two namespace nodes when a peer was stopped
        (RuntimeError("Application timeout caused pair closure"), True),
        (RuntimeError("CUDA out of memory"), False),
        (ValueError("gloo/transport"), False),
    ],
)
def test_collective_failures_are_told_from_own_errors(err: BaseException, collective: bool) -> None:
    assert is_collective_failure(err) is collective


def test_a_dist_error_is_a_collective_failure() -> None:
    import torch.distributed as dist

    assert is_collective_failure(dist.DistBackendError("NCCL communicator was aborted"))


def test_short_cause_drops_the_source_location() -> None:
    assert short_cause(RuntimeError(GLOO_TIMEOUT)) == (
        "gloo: Timed out waiting 2000ms for recv operation to complete"
    )
    assert short_cause(RuntimeError("")) == "RuntimeError"


def test_bounded_gives_up_on_a_call_that_does_not_return() -> None:
    with pytest.raises(StoreUnanswered):
        bounded(lambda: time.sleep(5), 0.2)
    with pytest.raises(KeyError):
        bounded(lambda: {}["x"], 1)
    assert bounded(lambda: 7, 1) == 7


def test_a_store_that_stops_answering_is_named_within_the_bound(
    monkeypatch: pytest.MonkeyPatch, port: int
) -> None:
    """Rank 0's store stops answering (its host stopped, frozen or cut off: the forwarder in
    between freezes, tests/forwarder.py says why not SIGSTOP): the others still answer,
    having waited out one store operation (store_s), not one per operation."""
    waited: list[float] = []

    def counted(call: Callable[[], object], timeout_s: float) -> object:
        """The watch's own bound, counting the operations it waited out."""
        try:
            return bounded(call, timeout_s)
        except StoreUnanswered:
            waited.append(timeout_s)
            raise

    monkeypatch.setattr(watch_module, "bounded", counted)
    link = Forwarder(port)
    try:
        watch = _watch(link.port, 1)
        watch.start()
        assert watch.board.read_all()[1] is not None  # the link carries the store's answers
        link.freeze()
        began = time.monotonic()
        lost = watch.explain(RuntimeError(GLOO_TIMEOUT))
        took = time.monotonic() - began
        watch.stop()
    finally:
        link.cut()
    assert lost is not None
    assert f"the rendezvous store at 127.0.0.1:{link.port} did not answer within 2.5 s" in (
        lost.message
    )
    # The claim: after the first operation goes unanswered the rest give up at once.
    assert waited == [LIMITS.store_s]
    # A hang guard only (one wait of store_s takes 2.5 s): not a verdict on speed.
    assert took < 10 * LIMITS.store_s, f"hang guard: explain() took {took:.1f} s"


BACKSTOP = """
import sys, time
from datetime import timedelta
from torch.distributed import TCPStore
from ddpimg.runtime.stall.watch import Board, StallLimits, StallWatch
from ddpimg.runtime.stall import record
from ddpimg.runtime.store_auth import RecordSeal
server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
board = Board(server, 1, f"127.0.0.1:{server.port}", 5.0, RecordSeal(bytes(32)))
limits = StallLimits(1.0, 0.2, 2.0, 5.0, 0.5, 1.5)
watch = StallWatch(board, rank=0, host="here", limits=limits, sentinel=False,
                   on_fatal=lambda err: print("recorded", err.details["ranks"], flush=True))
watch.start()
if sys.argv[1] != "setup":
    watch.progress.enter(sys.argv[1], 12)
time.sleep(float(sys.argv[2]))
watch.stop()
print("finished", flush=True)
"""


def test_the_backstop_ends_a_loop_that_stopped_moving() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", BACKSTOP, phases.DATA, "60"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == exitcodes.RANK_LOST, proc.stderr
    assert proc.stderr.count("ddpimg: error:") == 1
    assert proc.stderr.startswith(
        "ddpimg: error: rank 0 (here) gave up at step 12 (no progress for 2 s in phase data "
        "(--timeout 1)): every rank still reports"
    )
    assert proc.stdout == "recorded []\n"  # ended by the backstop, not after the 60 s sleep


def test_the_backstop_leaves_setup_alone() -> None:
    """Every rank may spend long in setup at once (decoding a data set); its collectives
    time out by themselves."""
    proc = subprocess.run(
        [sys.executable, "-c", BACKSTOP, phases.SETUP, "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "finished\n"


def test_an_unknown_runtime_error_counts_as_collective_when_a_peer_is_already_silent(
    port: int,
) -> None:
    _silent(port, 1, phases.DATA, phases.FORWARD)
    with _watch(port, 0) as waiter:
        time.sleep(LIMITS.stale_after_s + 0.5)
        lost = waiter.explain(RuntimeError("some words no marker knows"))
    assert lost is not None
    assert "rank 1 (host host1, pid " in lost.message
    assert "(some words no marker knows)" in lost.message


def test_an_unknown_runtime_error_with_everyone_reporting_is_this_ranks_own(
    two: tuple[StallWatch, StallWatch],
) -> None:
    own, other = two
    _at(own, 4, phases.DATA, phases.FORWARD)
    _at(other, 4, phases.DATA, phases.FORWARD, phases.BACKWARD)
    assert own.explain(RuntimeError("CUDA out of memory")) is None
    lost = other.explain(RuntimeError(GLOO_TIMEOUT))
    assert lost is not None
    assert "failed at step 4 in phase forward: RuntimeError: CUDA out of memory" in lost.message


SCRIPT_BACKSTOP = """
import sys, time
from datetime import timedelta
from torch.distributed import TCPStore
from ddpimg.runtime.stall.watch import Board, StallLimits, StallWatch
from ddpimg.runtime.stall import record
from ddpimg.runtime.store_auth import RecordSeal
world, sleep_s = int(sys.argv[1]), float(sys.argv[2])
seal = RecordSeal(bytes(32))
server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
limits = StallLimits(1.0, 0.2, 1.0, 2.0, 0.5, 1.0)
if world == 2:  # rank 1 reported once, then its process stopped
    other = StallWatch(Board(server, 2, "", 2.0, seal), rank=1, host="there", limits=limits,
                       sentinel=False, script=True)
    other.board.register()
    other.board.publish_bounded(other.record())
board = Board(server, world, f"127.0.0.1:{server.port}", 2.0, seal)
watch = StallWatch(board, rank=0, host="here", limits=limits, sentinel=False, script=True)
watch.start()
watch.progress.enter(record.TRAIN, 7)
time.sleep(sleep_s)
watch.stop()
print("finished", flush=True)
"""


def test_a_scripts_backstop_leaves_a_phase_every_rank_shares_alone() -> None:
    """A script is seen only at its optimizer steps: a long evaluation without progress
    calls, on every rank at once, is no stall."""
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT_BACKSTOP, "1", "4"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "finished\n"


def test_a_scripts_backstop_gives_up_when_a_rank_went_silent() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT_BACKSTOP, "2", "30"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == exitcodes.RANK_LOST, proc.stderr
    assert proc.stderr.count("ddpimg: error:") == 1
    assert proc.stderr.startswith(
        "ddpimg: error: rank 0 (here) gave up at step 7 (no progress for "
    ), proc.stderr
    assert "in phase train (--timeout 1)): rank 1 (host there, pid " in proc.stderr
    assert "no checkpoint known to ddpimg (the script's own are not tracked)" in proc.stderr
    assert "then run the same command again" in proc.stderr


def test_a_script_waits_the_timeout_whatever_the_backend() -> None:
    """Its process group's timeout is its own (transformers: 30 minutes): the backstop
    gives up after --timeout with Gloo too."""
    assert StallLimits.for_timeout(20, "gloo", script=True).backstop_s == 20
    assert StallLimits.for_timeout(20, "gloo").backstop_s > 20


@pytest.mark.parametrize(
    "said",
    [
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer "
        "[127.0.0.1]:49312",
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] Read error "
        "[127.0.0.1]:8344: Connection reset by peer",
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:600] Write error: Broken pipe",
    ],
)
def test_a_peer_gone_is_one_cause_whatever_gloos_words(said: str) -> None:
    """Gloo words a dead peer by the moment it died: the survivors' line must not."""
    assert short_cause(RuntimeError(said)) == "gloo: a peer closed its connection"


def test_a_preemption_every_rank_stopped_for_is_confirmed_at_once(port: int) -> None:
    """A script that acts on no preemption: a signal every rank got (the scheduler's) is a
    preemption as soon as the others say they stopped for it too."""
    other = _watch(port, 1)
    other.board.register()
    other._finish("preempted")
    other.board.confirm_preemption()
    with _watch(port, 0) as waiter:
        began = time.monotonic()
        assert waiter.preempted("SIGTERM") is None
        assert time.monotonic() - began < LIMITS.stale_after_s
        record = waiter.board.read_all()[0]
        assert record is not None
        assert record.state == "preempted"


def test_a_signal_to_the_survivors_of_a_dead_rank_is_no_preemption(port: int) -> None:
    """Issue 54: torch's agent sent SIGTERM to the survivor of a rank killed by SIGKILL, and
    the script's runtime took it for a preemption (75). The dead rank's record goes silent:
    a lost rank (5), named."""
    _silent(port, 1, phases.TRAIN)
    with _watch(port, 0) as survivor:
        lost = survivor.preempted("SIGTERM")
    assert lost is not None
    assert exitcodes.for_error(lost) == exitcodes.RANK_LOST
    assert lost.message.startswith(
        "rank 0 (host0) gave up at step 0 (SIGTERM, sent to the survivors of a lost rank: no "
        "preemption): rank 1 (host host1, pid "
    )
    assert "stopped reporting" in lost.message


def test_a_rank_waiting_for_one_that_failed_on_its_own_gives_up_as_a_failed_run(
    port: int,
) -> None:
    """Rank 0 (which serves the store) failed on its own while rank 1 waits for it in a
    collective: rank 1 must read that before rank 0's process, and the store, are gone
    (issue 54: under srun rank 1 found the store gone and exited 5). The failure look ends
    rank 1's process as the backstop would: in a process of its own here."""
    failed = _watch(port, 0)
    failed.board.register()
    failed.progress.enter(phases.COLLECTIVE, 7)
    assert failed.explain(ValueError("rank 0's own error")) is None
    code = f"""
import sys, time
sys.path[:0] = {sys.path!r}
from tests.runtime.stall.test_watch import _watch, _at, phases
waiter = _watch({port}, 1)
_at(waiter, 7, phases.BACKWARD)
waiter.start()
time.sleep(60)  # a collective waiting for rank 0
"""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == exitcodes.TRAINING_FAILED, done.stderr
    assert time.monotonic() - began < 30  # a hang guard: a few heartbeats
    assert "rank 0 (host host0, pid " in done.stderr
    assert "failed at step 7 in phase collective: ValueError: rank 0's own error" in done.stderr
