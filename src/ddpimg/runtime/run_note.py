"""Between ``train --nproc-per-node``'s launcher and its rank 0: where the run's record is,
so that the launcher's verdict reaches manifest.json too.

A worker killed by a signal says nothing, and when it is rank 0 its manifest.json stays
"running"; a survivor's record names the lost rank but cannot know the signal. The launcher
knows both once its workers have ended: it names a file in ``DDPIMG_RUN_NOTE`` (its own
temporary folder), rank 0 writes the run's directory there when it starts the record, and
the launcher then writes its verdict into that directory's manifest.json (``status``,
``exit_status``, ``error``, and ``killed``: the rank, host, pid and signal), so that the
manifest says what the exit status says.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ddpimg.endings.signals import signal_name
from ddpimg.endings.workers import LauncherVerdict
from ddpimg.fsio import write_json_atomic
from ddpimg.run_files import MANIFEST, MANIFEST_LIMIT
from ddpimg.untrusted import BadInput, read_json, read_text

RUN_NOTE_VARIABLE = "DDPIMG_RUN_NOTE"
_MAX_NOTE = 8192
_RUNNING = "running"


def tell_launcher(out: Path, env: Mapping[str, str] = os.environ) -> None:
    """Rank 0: write the run's directory into the launcher's note, if there is one (best
    effort: the record matters more than the note). The note is a new file: a name that is
    taken already (a variable set by hand, a link) is left alone."""
    note = env.get(RUN_NOTE_VARIABLE)
    if not note:
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(OSError):
        descriptor = os.open(note, flags, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            stream.write(str(out.absolute()))


def noted_run(note: Path) -> Path | None:
    """The run directory rank 0 wrote into ``note``; None when it wrote none."""
    try:
        text = read_text(note, _MAX_NOTE).strip()
    except (OSError, BadInput):
        return None
    return Path(text) if text.startswith("/") else None


def record_verdict(out: Path, verdict: LauncherVerdict) -> bool:
    """Bring ``out``'s manifest.json in line with the launcher's ``verdict`` (written after
    every worker ended): a rank killed by a signal is recorded under ``killed``, and a
    manifest still "running" (rank 0 was the one killed) or of another exit status is
    finished as the run failed with the verdict's status. Returns whether it wrote."""
    path = out / MANIFEST
    try:
        manifest: Any = read_json(path, MANIFEST_LIMIT)
    except (OSError, BadInput):
        return False
    if not isinstance(manifest, dict):
        return False
    cause = verdict.cause
    changed = False
    if cause is not None and cause.killed:
        manifest["killed"] = {
            "rank": cause.rank,
            "host": cause.host,
            "pid": cause.pid,
            "signal": signal_name(-cause.code),
        }
        changed = True
    if manifest.get("status") == _RUNNING or manifest.get("exit_status") != verdict.status:
        manifest["status"] = "failed"
        manifest["exit_status"] = verdict.status
        if not manifest.get("ended_utc"):
            manifest["ended_utc"] = (
                datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
            )
        if verdict.message is not None:
            manifest["error"] = verdict.message
        changed = True
    if changed:
        with contextlib.suppress(OSError):
            write_json_atomic(path, manifest)
    return changed
