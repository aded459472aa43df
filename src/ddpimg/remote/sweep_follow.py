"""``ddpimg follow SWEEP``: a sweep's array job (``ddpimg submit --sweep``) as one table of
its points, polled over the connection.

Each poll asks Slurm for the array's tasks (``jobinfo.parse_array``) and reads, in one
program, the manifest and the end of ``metrics.jsonl`` of each point whose task runs or has
just ended (``programs.sweep_points``); a point read after its task ended is not read again.
On a terminal the table is redrawn in place; elsewhere each point's changes are lines of
their own (PENDING, RUNNING, REQUEUED after a preemption, how its run ended) and the table
comes once, at the end. The end is the sweep's verdict: its points completed, running and
failed, and the best by its final eval loss.

Reconnecting, Slurm's silences and Ctrl-C are the single run's (``follow.Follower``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from ddpimg.remote import programs
from ddpimg.remote.follow import POLL_TIMEOUT_S, UNKNOWN_POLLS, Ended, Follower, Screen
from ddpimg.remote.jobinfo import COMPLETED, JobInfo, parse_array
from ddpimg.remote.transport import RemoteError
from ddpimg.remote.verdict import run_verdict, text
from ddpimg.runs.records import RunRecord, progress_of
from ddpimg.sweep.results import PointResult, SweepFile, SweepResults, counts_words, verdict
from ddpimg.sweep.spec import Point
from ddpimg.sweep.table import points_table
from ddpimg.untrusted import parse_json

MANIFEST_LIMIT = 1 << 20
METRICS_TAIL = 16 << 10
READ_LIMIT = 64 << 20
# Points read in one program: a sweep of many points running at once is read in parts.
POINTS_PER_READ = 100


class TableScreen(Screen):
    """A ``Screen`` with a table under its lines: on a terminal the table is redrawn in
    place and a line said goes above it; elsewhere the table is shown only by ``show``."""

    def __init__(self, stream: TextIO, interactive: bool) -> None:
        super().__init__(stream, interactive)
        self._rows: list[str] = []
        self._drawn = 0

    def line(self, words: str) -> None:
        if self.held:
            super().line(words)
            return
        self._erase()
        self.stream.write(words + "\n")
        self._draw()

    def table(self, rows: list[str]) -> None:
        """The table now; redrawn at once on a terminal."""
        self._rows = rows
        if self.interactive and not self.held:
            self._erase()
            self._draw()

    def show(self) -> None:
        """The table as lines (elsewhere than on a terminal, where it is already there)."""
        if not self.interactive:
            self.stream.write("\n".join(self._rows) + "\n")
            self.stream.flush()

    def _erase(self) -> None:
        if self._drawn:
            # To the start of the table's first line, and everything from there on cleared.
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def _draw(self) -> None:
        if self.interactive and self._rows:
            self.stream.write("\n".join(self._rows) + "\n")
            self._drawn = len(self._rows)
        self.stream.flush()


def job_words(info: JobInfo | None) -> str:
    """A task's state for the table: ``RUNNING``, ``PENDING (restart 1)``."""
    if info is None:
        return ""
    again = f" (restart {info.restarts})" if info.restarts else ""
    return f"{text(info.state, 20)}{again}"


class SweepFollower(Follower):
    """Follows the array job of the sweep ``run`` (``run.points``) until every task ended."""

    screen: TableScreen

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.points = tuple(Point(index, (), name) for index, name in enumerate(self.run.points))
        self.tasks: dict[int, JobInfo] = {}
        self.records: dict[str, RunRecord] = {}
        self.final: set[str] = set()  # read once their task ended
        self.shown: dict[str, tuple[str, ...]] = {}
        self.restarts: dict[str, int] = {}

    def poll(self) -> Ended | None:
        said = self._scontrol()
        if said is not None:
            self.seen.unknown = 0
            self.tasks.update(parse_array(said, self.run.job_id))
        forgotten = said is None and self.seen.unknown >= UNKNOWN_POLLS
        self._read([point.name for point in self.points if self._to_read(point, forgotten)])
        for point in self.points:
            if self._ended(point, forgotten) and point.name in self.records:
                self.final.add(point.name)
        self._show()
        if forgotten or all(self._ended(point, False) for point in self.points):
            return self._finish(forgotten)
        return None

    def _ended(self, point: Point, forgotten: bool) -> bool:
        info = self.tasks.get(point.index)
        return forgotten if info is None else info.ended

    def _to_read(self, point: Point, forgotten: bool) -> bool:
        if point.name in self.final:
            return False
        info = self.tasks.get(point.index)
        # A task pending again after a requeue: its manifest says why it stopped.
        return forgotten or info is None or info.state != "PENDING" or info.restarts > 0

    def _read(self, names: list[str]) -> None:
        for start in range(0, len(names), POINTS_PER_READ):
            part = names[start : start + POINTS_PER_READ]
            answer = self.transport.run(
                programs.sweep_points(self.run.run_dir, part, MANIFEST_LIMIT, METRICS_TAIL),
                "the sweep's points on the login node",
                limit=READ_LIMIT,
                timeout=POLL_TIMEOUT_S,
            )
            if answer.status == programs.MISSING:
                return  # no task has started yet
            if answer.status != 0:
                raise RemoteError(
                    f"{self.run.host}: reading the sweep's points in {text(self.run.run_dir)} "
                    f"failed (status {answer.status})",
                    hint="check the sweep's directory on the login node",
                )
            self.records.update(self._records(answer.text, set(part)))

    def _records(self, said: str, asked: set[str]) -> dict[str, RunRecord]:
        """The points' runs as the program's lines say them (a name not asked is dropped)."""
        found: dict[str, dict[str, bytes]] = {}
        current: dict[str, bytes] | None = None
        for line in said.splitlines():
            key, _, value = line.partition(" ")
            if key == "point":
                current = found.setdefault(value, {}) if value in asked else None
            elif current is not None and key in ("manifest", "metrics"):
                try:
                    current[key] = base64.b64decode(value, validate=True)
                except (binascii.Error, ValueError):
                    continue
        records = {}
        for name, files in found.items():
            manifest = _object(files.get("manifest"))
            metrics = files.get("metrics")
            steps, loss, eval_loss = (
                progress_of(metrics, cut=len(metrics) >= METRICS_TAIL)
                if metrics is not None
                else (None, None, None)
            )
            path = Path(self.run.run_dir) / name
            records[name] = RunRecord(path, manifest, None, steps, loss, eval_loss)
        return records

    def _results(self) -> SweepResults:
        file = SweepFile(self.run.name, (), (), self.points, {})
        points = tuple(PointResult(point, self.records.get(point.name)) for point in self.points)
        return SweepResults(Path(self.run.run_dir), file, points)

    def _show(self) -> None:
        results = self._results()
        jobs = {point.index: job_words(self.tasks.get(point.index)) for point in self.points}
        rows = points_table(results, jobs).splitlines()
        rows.append(f"{self.run.name}: {verdict(results)}")
        self.screen.table(rows)
        for result in results.points:
            info = self.tasks.get(result.point.index)
            if info is None:
                continue
            name = result.point.name
            record = result.record
            if info.restarts > self.restarts.get(name, 0):
                self.restarts[name] = info.restarts
                manifest = None if record is None else record.manifest
                why = (
                    run_verdict(manifest, None)
                    if manifest and manifest.get("status") != "running"
                    else "requeued"
                )
                self.say(f"{text(name)}: REQUEUED (restart {info.restarts}): the run {why}")
            # A task's state, and once it ended the run's: the run's own changes while its
            # task runs are the table's (on a terminal), not lines of their own.
            key = (job_words(info), result.status if info.ended else "")
            if self.screen.interactive or key == self.shown.get(name):
                continue
            self.shown[name] = key
            words = key[0]
            if info.ended and record is not None:
                words += f": the run {run_verdict(record.manifest, _summary(record))}"
            self.say(f"{text(name)}: {words}")

    def _finish(self, forgotten: bool) -> Ended:
        results = self._results()
        self.screen.show()
        states = [self.tasks[p.index].state for p in self.points if p.index in self.tasks]
        failed = [state for state in states if state != COMPLETED]
        state = failed[0] if failed else ("ENDED" if forgotten else COMPLETED)
        if forgotten:
            self.say(f"Slurm no longer knows array job {self.run.job_id}; its points' runs decide")
        for result in results.points:
            if result.category != "completed" and result.record is not None:
                why = run_verdict(result.record.manifest, None)
                self.say(f"{text(result.point.name)}: the run {why}")
        self.say(f"{text(state, 40)}: {verdict(results)}")
        ok = results.ok and (forgotten or not failed)
        best = results.best()
        counts = counts_words(results.counts(), len(results.points))
        return Ended(state, counts, None, None if best is None else best[2], ok)


def _summary(record: RunRecord) -> dict[str, Any]:
    """What a point's run says at its end, as a summary line's keys."""
    return {"steps": record.steps, "final_loss": record.loss, "eval_loss": record.eval_loss}


def _object(data: bytes | None) -> Mapping[str, Any] | None:
    if data is None or len(data) >= MANIFEST_LIMIT:
        return None
    try:
        value = parse_json(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
