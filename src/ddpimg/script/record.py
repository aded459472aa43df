"""Rank 0's run record of a script: ``manifest.json`` and ``metrics.jsonl`` in ``--out``, the
same files, written the same way, as a bundled trainer's (``ddpimg.train.outputs``).

The manifest says what ran (the script, its arguments and digest), where (versions, the
launch plan, the world) and how it ended (status and exit status, ``rank_lost``,
``preemption``), plus what only a script has: the output directories of the frameworks it
used (``outputs``: Hugging Face's ``output_dir``, Lightning's ``default_root_dir``) and the
newest checkpoint they wrote that ddpimg was told of.

A run of the same script in an ``--out`` whose last run did not complete (preempted, a rank
lost, killed at the time limit) continues it: its metrics lines are kept (the summary
excepted), and once the framework resumes from a checkpoint, the lines after that
checkpoint's step are dropped (they will be logged again). Any other earlier run there is
never replaced silently (``earlier_run``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpimg.addon.mounted import addon_records
from ddpimg.buildinfo import image_identity
from ddpimg.errors import DdpimgError
from ddpimg.fsio import write_json_atomic, write_text_atomic
from ddpimg.run_files import MANIFEST, MANIFEST_LIMIT, MAX_METRICS_LINE, METRICS
from ddpimg.script.options import RESUME_NONE
from ddpimg.trackers.settings import TrackerOptions
from ddpimg.train.outputs import MetricsWriter, RunRecorder, collect_versions, utc_now
from ddpimg.train.progress import Progress
from ddpimg.untrusted import parse_json, read_json, read_lines

if TYPE_CHECKING:
    from ddpimg.trackers import Trackers

COMPLETED = "completed"


def earlier_run(out: Path, script: str, resume: str) -> dict[str, Any] | None:
    """The run this one continues: the manifest of ``out``'s earlier run of the same script
    when that did not complete (preempted, a rank lost, killed at the time limit); None for
    a new run (no earlier run, or ``--resume none``). Any other earlier run is kept, with a
    DdpimgError: this run would replace its manifest.json and metrics.jsonl."""
    path = out / MANIFEST
    try:
        earlier: Any = read_json(path, MANIFEST_LIMIT)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):
        earlier = None
    if resume == RESUME_NONE:
        return None
    if not isinstance(earlier, dict):
        described = "a run whose manifest.json cannot be read"
    elif not isinstance(earlier.get("script"), dict):
        described = f"a run of a bundled trainer ({earlier.get('arguments', {}).get('trainer')})"
    elif earlier["script"].get("path") != os.path.abspath(script):
        described = f"a run of another script ({earlier['script'].get('path')})"
    elif earlier.get("status") == COMPLETED:
        described = "a completed run of this script"
    else:
        return earlier
    raise DdpimgError(
        f"--out {out} holds {described} ({path}): this run would replace its manifest.json "
        "and metrics.jsonl",
        hint="use another --out, or --resume none to start over in this one",
    )


def same_script(script: str, args: Sequence[str]) -> Callable[[Mapping[str, Any]], bool]:
    """Whether an earlier run's manifest is a run of ``script`` with ``args``: the same
    configuration, for a run without ``--out`` (``ddpimg.runs``)."""
    path, given = os.path.abspath(script), list(args)

    def same(manifest: Mapping[str, Any]) -> bool:
        recorded = manifest.get("script")
        return (
            isinstance(recorded, Mapping)
            and recorded.get("path") == path
            and recorded.get("args") == given
        )

    return same


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _complete_lines(path: Path, keep: Any) -> list[str]:
    """The complete lines of ``path`` whose record passes ``keep`` (none if it is missing)."""
    kept = []
    try:
        for line in read_lines(path, MAX_METRICS_LINE):
            if not line.endswith("\n"):
                break  # a line cut short by a crash
            record = parse_json(line)
            if isinstance(record, dict) and keep(record):
                kept.append(line)
    except (OSError, ValueError):  # missing, or the end of what reads as metrics
        pass
    return kept


def _open_trackers(
    out: Path,
    manifest: dict[str, Any],
    env: Mapping[str, str],
    log_to: Sequence[str],
    options: TrackerOptions | None,
) -> Trackers | None:
    """Rank 0's trackers (None without any). A continued run continues their runs; its
    resume step is not known before the framework resumes, so the trackers are told the
    step of the previous run's last checkpoint, where a continued framework resumes."""
    if not log_to:
        return None
    from ddpimg.trackers import check_trackers, open_trackers

    options = options or TrackerOptions()
    manifest["trackers"] = check_trackers(log_to, out, env, options).to_json()
    continued = manifest["continues"]
    last = (continued or {}).get("last_checkpoint") or {}
    described = manifest | {"resumed_from": {"step": last.get("step")}}
    return open_trackers(log_to, out, described, env, continued is not None, options=options)


def _last_train_step(lines: Sequence[str]) -> int:
    """The step of the newest train line among ``lines`` (complete JSON lines); 0: none."""
    last = 0
    for line in lines:
        record = json.loads(line)
        if record.get("kind") == "train" and isinstance(record.get("step"), int):
            last = max(last, record["step"])
    return last


class ScriptRecord:
    """The record of one script run (rank 0 only)."""

    def __init__(self, recorder: RunRecorder, last_step: int = 0) -> None:
        self._recorder = recorder
        self.manifest = recorder.manifest
        self.out = recorder.out
        self._last_step = last_step  # of the newest train line

    @classmethod
    def start(
        cls,
        out: Path,
        *,
        script: str,
        args: Sequence[str],
        run_info: Mapping[str, Any],
        world: Mapping[str, Any],
        options: Mapping[str, Any],
        previous: Mapping[str, Any] | None,
        env: Mapping[str, str],
        log_to: Sequence[str] = (),
        tracker_options: TrackerOptions | None = None,
    ) -> ScriptRecord:
        """Create ``out`` and write the "running" manifest. ``previous``: the manifest of the
        run this one continues (``earlier_run``), whose metrics lines are kept (summaries
        excepted). ``log_to``: the trackers that get every line too (a continued run
        continues their runs)."""
        versions = collect_versions(env)
        manifest: dict[str, Any] = {
            "status": "running",
            "exit_status": None,
            "started_utc": utc_now(),
            "ended_utc": None,
            "script": {
                "path": os.path.abspath(script),
                "args": list(args),
                "sha256": _digest(script),
            },
            "arguments": dict(options),
            "distributed": dict(world),
            "run_info": dict(run_info),
            "versions": versions,
            "image": image_identity(versions["image"]),
            "addons": addon_records(env),
            "outputs": {},
            "continues": None,
        }
        metrics = out / METRICS
        keep, kept = None, []
        if previous is not None:
            manifest["continues"] = {
                "status": previous.get("status"),
                "started_utc": previous.get("started_utc"),
                "last_checkpoint": previous.get("last_checkpoint"),
                "progress": previous.get("progress"),
            }
            kept = _complete_lines(metrics, lambda record: record.get("kind") != "summary")
            keep = len(kept)
        try:
            out.mkdir(parents=True, exist_ok=True)
            if keep is not None:
                write_text_atomic(metrics, "".join(kept))
            trackers = _open_trackers(out, manifest, env, log_to, tracker_options)
            progress = Progress(sys.stderr, interactive=False)
            recorder = RunRecorder(out, manifest, progress, keep, trackers=trackers)
        except OSError as err:
            raise DdpimgError(
                f"--out {out}: cannot write there ({err.strerror}: {err.filename})",
                hint="choose a writable directory with --out",
            ) from err
        return cls(recorder, _last_train_step(kept))

    def write(self, record: Mapping[str, Any]) -> None:
        """One metrics line. A train line of a step already written (a continued run that
        resumed from an earlier checkpoint than ddpimg knew of: a plain script's own) first
        drops the lines from that step on: metrics.jsonl stays one trajectory."""
        step = record.get("step")
        if record.get("kind") == "train" and isinstance(step, int):
            if step <= self._last_step:
                self.rewind(step - 1)
            self._last_step = step
        self._recorder.metrics.write(record)

    def rewind(self, step: int) -> None:
        """Keep only the metrics lines up to optimizer step ``step`` (a resume from a
        checkpoint of that step logs the later ones again)."""
        path = self.out / METRICS
        self._recorder.metrics.close()
        kept = _complete_lines(
            path, lambda record: record.get("kind") != "summary" and record.get("step", 0) <= step
        )
        write_text_atomic(path, "".join(kept))
        sink = self._recorder.metrics.sink
        self._recorder.metrics = MetricsWriter(path, keep_lines=len(kept) or None, sink=sink)
        self._last_step = _last_train_step(kept)

    def update(self, **entries: Any) -> None:
        """Add or replace manifest entries and write the manifest again."""
        self.manifest.update(entries)
        write_json_atomic(self.out / MANIFEST, self.manifest)

    def finish(self, status: str, exit_status: int, error: str | None = None) -> None:
        self._recorder.finish(status, exit_status, error)
