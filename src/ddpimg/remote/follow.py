"""``ddpimg follow``: a submitted run's life, polled over the connection.

Each poll asks Slurm for the job (``jobinfo``) and reads what ``metrics.jsonl`` gained
(``metrics_tail``), then prints what changed: PENDING with Slurm's reason and the expected
start, RUNNING on which nodes, REQUEUED after a preemption (with the manifest's word on why),
a live line of step, loss, samples/s and time left, the evaluations; at the end the job's
state with the run's own verdict from its manifest, and on a failure the log's last lines.

A connection that drops is opened again with a growing pause (``BACKOFF_S``), up to
``give_up_s``; the run is read on from where it stopped, so no line is shown twice. Ctrl-C
ends only this command: the job goes on (the caller says so, and never cancels it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from ddpimg.endings.reports import killed_ranks
from ddpimg.remote import programs
from ddpimg.remote.jobinfo import COMPLETED, PENDING, RUNNING, JobInfo, parse_job
from ddpimg.remote.metrics_tail import MetricsTail
from ddpimg.remote.state import RemoteRun
from ddpimg.remote.transport import ConnectionLost, RemoteError, Transport
from ddpimg.remote.verdict import (
    Pace,
    eval_line,
    integer,
    log_lines,
    nodes_words,
    number,
    reason_words,
    run_verdict,
    text,
    train_line,
)
from ddpimg.run_files import MANIFEST, METRICS
from ddpimg.untrusted import parse_json

DEFAULT_INTERVAL_S = 5.0
DEFAULT_GIVE_UP_S = 600.0
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0)
MAX_MANIFEST = 4 << 20
LOG_TAIL_BYTES = 16 << 10
LOG_LINES = 20
# Polls in a row in which Slurm did not know the job before it is taken as gone.
UNKNOWN_POLLS = 3
POLL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Ended:
    """How following ended: Slurm's last state, the manifest's status, steps and loss."""

    state: str
    status: str
    steps: int | None
    loss: float | None
    ok: bool


class Screen:
    """Lines on ``stream``; on a terminal the live line is redrawn in place. While ``held``,
    lines wait (``release`` writes them): what a poll read while the connection came back
    is shown after the line that says it came back."""

    def __init__(self, stream: TextIO, interactive: bool) -> None:
        self.stream = stream
        self.interactive = interactive
        self.held = False
        self._waiting: list[tuple[bool, str]] = []
        self._live = ""

    def line(self, words: str) -> None:
        if self.held:
            self._waiting.append((False, words))
            return
        self._end_live()
        self.stream.write(words + "\n")
        self.stream.flush()

    def release(self) -> None:
        self.held = False
        waiting, self._waiting = self._waiting, []
        for live, words in waiting:
            (self.live if live else self.line)(words)

    def live(self, words: str) -> None:
        if self.held:
            self._waiting.append((True, words))
            return
        if self.interactive:
            self.stream.write("\r" + words.ljust(len(self._live)))
            self._live = words
        else:
            self.stream.write(words + "\n")
        self.stream.flush()

    def _end_live(self) -> None:
        if self._live:
            self.stream.write("\n")
            self._live = ""

    def close(self) -> None:
        self._end_live()
        self.stream.flush()


@dataclass
class _Seen:
    """What was shown so far."""

    state: tuple[str, ...] = ()
    restarts: int = 0
    unknown: int = 0
    silent_since: float | None = None  # when Slurm last began not to answer
    total_steps: int | None = None
    summary: dict[str, Any] | None = None
    last_train: dict[str, Any] | None = None
    script_steps: int | None = None
    tail: MetricsTail = field(default_factory=MetricsTail)
    pace: Pace = field(default_factory=Pace)


class Follower:
    """Follows ``run`` over ``transport`` until its job ends (``follow``)."""

    def __init__(
        self,
        transport: Transport,
        run: RemoteRun,
        screen: Screen,
        *,
        reconnect: Callable[[], None],
        interval_s: float = DEFAULT_INTERVAL_S,
        give_up_s: float = DEFAULT_GIVE_UP_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.transport = transport
        self.run = run
        self.screen = screen
        self.reconnect = reconnect
        self.interval_s = interval_s
        self.give_up_s = give_up_s
        self.clock = clock
        self.sleep = sleep
        self.seen = _Seen()

    def say(self, words: str) -> None:
        self.screen.line(f"ddpimg: {self.run.name}: {words}")

    def follow(self) -> Ended:
        """Poll until the job ends; the end as seen."""
        while True:
            ended = self._with_retries(self.poll)
            if ended is not None:
                self.screen.close()
                return ended
            self.sleep(self.interval_s)

    def _with_retries(self, poll: Callable[[], Ended | None]) -> Ended | None:
        """``poll``, through dropped connections: reconnect with a growing pause."""
        lost_at: float | None = None
        attempt = 0
        while True:
            try:
                if lost_at is not None:
                    self.reconnect()
                    self.screen.held = True
                result = poll()
            except ConnectionLost as err:
                if not err.retryable:
                    raise
                now = self.clock()
                if lost_at is None:
                    lost_at = now
                    self.say(
                        f"lost the connection to {self.run.host} ({err.message}); reconnecting"
                    )
                if now - lost_at > self.give_up_s:
                    self.screen.release()
                    raise ConnectionLost(
                        f"{self.run.host}: no connection for {self.give_up_s:g} s ({err.message})",
                        hint=f"the job goes on; `ddpimg follow {self.run.name}` picks up where "
                        "this stopped",
                        retryable=False,
                    ) from err
                self.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1
                continue
            if lost_at is not None:
                self.screen.held = False
                self.say(f"reconnected to {self.run.host} after {self.clock() - lost_at:.0f} s")
                self.screen.release()
            return result

    # -- one poll ----------------------------------------------------------------------

    def poll(self) -> Ended | None:
        info = self._job()
        if info is not None:
            self.seen.unknown = 0
            self._show_state(info)
        self._show_metrics()
        if info is not None and info.ended:
            return self._end(info)
        if info is None and self.seen.unknown >= UNKNOWN_POLLS:
            return self._end(None)
        return None

    def _job(self) -> JobInfo | None:
        """Slurm's record of the job; None when there is none this poll."""
        said = self._scontrol()
        return None if said is None else parse_job(said, self.run.job_id)

    def _scontrol(self) -> str | None:
        """What ``scontrol show job`` says of the job; None when it says nothing this poll.
        Only Slurm's own "Invalid job id" counts towards UNKNOWN_POLLS: a controller that
        does not answer (a restart, a timeout) says nothing about the job, which may run on;
        after ``give_up_s`` of that, following ends with a RemoteError (the job goes on)."""
        answer = self.transport.run(
            programs.job_state(self.run.job_id), "Slurm's state of the job", timeout=POLL_TIMEOUT_S
        )
        if answer.status == 0:
            self.seen.silent_since = None
            return answer.text
        if answer.status == programs.UNKNOWN_JOB:
            self.seen.unknown += 1
            return None
        lines = answer.stderr.decode(errors="replace").strip().splitlines()
        why = text(lines[-1] if lines else f"scontrol exit status {answer.status}", 120)
        now = self.clock()
        if self.seen.silent_since is None:
            self.seen.silent_since = now
            self.say(f"Slurm did not answer ({why}); still following")
        elif now - self.seen.silent_since > self.give_up_s:
            raise RemoteError(
                f"{self.run.host}: Slurm did not answer for {self.give_up_s:g} s ({why})",
                hint=f"the job may go on; `ddpimg follow {self.run.name}` picks up where this "
                "stopped",
            )
        return None

    def _show_state(self, info: JobInfo) -> None:
        if info.restarts > self.seen.restarts:
            self.seen.restarts = info.restarts
            manifest = self._manifest()
            why = (
                run_verdict(manifest, None)
                if manifest and manifest.get("status") != "running"
                else "requeued"
            )
            self.say(f"REQUEUED (restart {info.restarts}): the run {why}")
            self.seen.pace = Pace()
        state = info.state
        key = (state, info.reason, info.nodes, str(info.restarts))
        if key == self.seen.state or info.ended:
            return
        self.seen.state = key
        # After a requeue the same state is another event: the restart tells them apart.
        again = f" (restart {info.restarts})" if info.restarts else ""
        if state == PENDING:
            self.say(f"PENDING{again}{reason_words(info.reason, info.start)}")
        elif state == RUNNING:
            self.say(f"RUNNING{again}{nodes_words(info.nodes)}")
        else:
            self.say(f"{text(state, 40)}{again}{reason_words(info.reason, '')}")

    def _show_metrics(self) -> None:
        """What metrics.jsonl gained: the newest train record as the live line, shown before
        an evaluation that came after it; a plain script's progress when it logs nothing."""
        if not self.run.run_dir:
            return
        records = self.seen.tail.read(self._reader(f"{self.run.run_dir}/{METRICS}"))
        newest = None
        for record in records:
            kind = record.get("kind")
            if kind == "train":
                self.seen.pace.add(int(record["step"]), number(record.get("elapsed_s")))
                newest = record
            elif kind == "eval":
                self._show_train(newest)
                newest = None
                self.screen.line(eval_line(record))
            elif kind == "summary":
                self.seen.summary = record
        self._show_train(newest)
        if self.seen.tail.last_step is None and self._is_script:
            progress = self._script_progress()
            if progress is not None:
                self.screen.live(train_line(progress, None, None))

    def _show_train(self, record: dict[str, Any] | None) -> None:
        if record is None:
            return
        if self.seen.total_steps is None:
            self.seen.total_steps = integer((self._manifest() or {}).get("total_steps"))
        step = int(record["step"])
        left = self.seen.pace.left(step, self.seen.total_steps)
        self.seen.last_train = record
        self.screen.live(train_line(record, self.seen.total_steps, left))

    @property
    def _is_script(self) -> bool:
        return "--script" in self.run.command

    def _script_progress(self) -> dict[str, Any] | None:
        """A script that logs nothing: its steps as the optimizer hooks counted them (over
        every run it continues) and this run's steps/s, from its manifest's ``progress``;
        None when there is nothing new."""
        progress = (self._manifest() or {}).get("progress")
        if not isinstance(progress, Mapping):
            return None
        steps = integer(progress.get("steps"))
        run_steps = integer(progress.get("run_steps"))
        elapsed = number(progress.get("elapsed_s"))
        if not steps or steps == self.seen.script_steps:  # none yet, or none since
            return None
        self.seen.script_steps = steps
        record: dict[str, Any] = {"kind": "train", "step": steps}
        if run_steps is not None and elapsed:
            record["steps_per_s"] = run_steps / elapsed
        self.seen.last_train = record
        return record

    def _end(self, info: JobInfo | None) -> Ended:
        manifest = self._manifest() if self.run.run_dir else None
        state = info.state if info is not None else "ENDED"
        exit_code = f" (exit {info.exit_code})" if info is not None and info.exit_code else ""
        if self.run.run_dir:
            said = f"the run {run_verdict(manifest, self.seen.summary)}"
        else:
            said = "no run directory to read (not a train command)"
        if info is None:
            said = f"Slurm no longer knows job {self.run.job_id}; {said}"
        self.say(f"{text(state, 40)}{exit_code}: {said}")
        status = str((manifest or {}).get("status") or "")
        if info is None:  # Slurm purged the job (MinJobAge): the run's own record decides
            ok = bool(self.run.run_dir) and status == "completed"
        else:
            ok = state == COMPLETED and (status == "completed" or not self.run.run_dir)
        if not ok:
            self._tell_killed(self._show_log(info))
        summary = self.seen.summary or {}
        last = self.seen.last_train or {}
        steps = integer(summary.get("steps")) or integer(last.get("step"))
        loss = number(summary.get("final_loss"))
        if loss is None:
            loss = number(last.get("loss"))
        return Ended(state, status, steps, loss, ok)

    def _tell_killed(self, log: bytes) -> None:
        """The last word on a rank the launcher says was killed by a signal (srun's ``task
        1: Killed``, Open MPI's ``exited on signal 9``, torchrun's ``exitcode: -9``), in
        ddpimg's words: the rank, its host, the signal and its usual cause."""
        killed = killed_ranks(log.decode("utf-8", "replace"))
        if killed:
            message, hint = killed[0].verdict(script=self._is_script)
            self.say(f"{message} ({killed[0].launcher} says so)")
            self.say(f"hint: {hint}")

    def _show_log(self, info: JobInfo | None) -> bytes:
        """The log's last lines (and returns them): where submit expected it, else where
        Slurm says it is; each the newest file of its Slurm filename pattern."""
        paths = [self.run.log] + ([info.log] if info is not None and info.log else [])
        for path in dict.fromkeys(paths):
            answer = self.transport.run(
                programs.tail_of(path, LOG_TAIL_BYTES), "the job's log", limit=LOG_TAIL_BYTES + 1
            )
            if answer.status == 0:
                break
        else:
            self.say(f"no log at {text(self.run.log)}")
            return b""
        self.say(f"the last lines of {text(path)}:")
        for line in log_lines(answer.stdout, LOG_LINES):
            self.screen.line(f"  | {line}")
        return answer.stdout

    # -- reading files -----------------------------------------------------------------

    def _reader(self, path: str) -> Callable[[int, int], bytes | None]:
        def read(start: int, limit: int) -> bytes | None:
            answer = self.transport.run(
                programs.read_from(path, start, limit),
                f"{text(path)} from the login node",
                limit=limit,
                timeout=POLL_TIMEOUT_S,
            )
            if answer.status == programs.MISSING:
                return None
            if answer.status != 0:
                raise RemoteError(
                    f"{self.run.host}: reading {text(path)} failed (status {answer.status})",
                    hint="check the run's directory on the login node",
                )
            return answer.stdout

        return read

    def _manifest(self) -> Mapping[str, Any] | None:
        data = self._reader(f"{self.run.run_dir}/{MANIFEST}")(0, MAX_MANIFEST)
        if data is None or len(data) >= MAX_MANIFEST:
            return None
        try:
            manifest = parse_json(data)
        except ValueError:
            return None
        return manifest if isinstance(manifest, dict) else None
