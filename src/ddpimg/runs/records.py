"""What a run directory says about its run, read without trusting it: ``manifest.json``
(status, start, what ran) and the end of ``metrics.jsonl`` (steps and loss so far).

Both files are opened without following a symbolic link and read only if they are regular
files of bounded size; a file that is missing, too large, special or not JSON makes the run
``unreadable``, never an error: a listing or a choice of run must go on past one broken
directory. Only directories (not links to them) directly under the runs root are runs.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpimg.errors import DdpimgError
from ddpimg.run_files import MANIFEST, MANIFEST_LIMIT, METRICS
from ddpimg.untrusted import parse_json

# The end of metrics.jsonl that is read for the last step: hundreds of lines.
METRICS_TAIL_BYTES = 64 << 10
COMPLETED = "completed"
UNREADABLE = "unreadable"


@dataclass(frozen=True)
class RunRecord:
    """One run directory as read: ``manifest`` None when missing or unreadable (``problem``
    says which), ``steps`` / ``loss`` from the summary line of a completed run, else from the
    newest train line (None when there is none); ``eval_loss`` the summary's, else the
    newest evaluation's, in the end of metrics.jsonl that is read."""

    path: Path
    manifest: Mapping[str, Any] | None
    problem: str | None = None
    steps: int | None = None
    loss: float | None = None
    eval_loss: float | None = None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def status(self) -> str:
        status = None if self.manifest is None else self.manifest.get("status")
        return status if isinstance(status, str) else UNREADABLE

    @property
    def completed(self) -> bool:
        return self.status == COMPLETED

    @property
    def started(self) -> str | None:
        started = None if self.manifest is None else self.manifest.get("started_utc")
        return started if isinstance(started, str) else None


def read_regular(path: Path, limit: int, tail: bool = False) -> bytes:
    """The bytes of ``path`` (its last ``limit`` with ``tail``), which must be a regular file
    reached without a symbolic link, of at most ``limit`` bytes unless ``tail``. OSError
    otherwise (``ELOOP`` for a link, ``EFBIG`` / ``EINVAL`` as below)."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer; a regular file ignores it.
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(descriptor, "rb") as stream:
        info = os.fstat(stream.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if info.st_size > limit:
            if not tail:
                raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
            stream.seek(info.st_size - limit)
        return stream.read(limit)


def read_run(path: Path) -> RunRecord:
    """``path`` read as a run directory (see the module docstring)."""
    try:
        manifest: Any = parse_json(read_regular(path / MANIFEST, MANIFEST_LIMIT))
    except FileNotFoundError:
        return RunRecord(path, None, f"no {MANIFEST}", *_progress(path, None))
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) else str(err)
        return RunRecord(path, None, f"{MANIFEST}: {reason}", *_progress(path, None))
    if not isinstance(manifest, dict):
        return RunRecord(path, None, f"{MANIFEST}: not a JSON object")
    return RunRecord(path, manifest, None, *_progress(path, manifest))


Progress = tuple[int | None, float | None, float | None]


def _progress(path: Path, manifest: Mapping[str, Any] | None) -> Progress:
    """(steps, loss, eval loss) from the end of metrics.jsonl (``progress_of``)."""
    try:
        text = read_regular(path / METRICS, METRICS_TAIL_BYTES, tail=True)
    except OSError:
        return None, None, None
    return progress_of(text, cut=len(text) == METRICS_TAIL_BYTES)


def progress_of(text: bytes, *, cut: bool) -> Progress:
    """(steps, loss, eval loss) from the end of a metrics.jsonl (``cut``: its first line may
    be a piece): the summary's ``steps`` and ``final_loss``, else the newest train line's step
    and loss; the summary's ``eval_loss``, else the newest evaluation's loss (a script's
    summary has none of its own)."""
    lines = text.split(b"\n")
    if cut:
        lines = lines[1:]
    summary: dict[str, Any] | None = None
    train: dict[str, Any] | None = None
    evaluation: dict[str, Any] | None = None
    for line in reversed(lines):
        try:
            record = parse_json(line)
        except ValueError:  # untrusted.BadInput included: too deep, a number too long
            continue
        if not isinstance(record, dict):
            continue
        kind = record.get("kind")
        if kind == "summary":
            if train is not None or summary is not None:
                break  # an earlier run's, before this one continued
            summary = record
        elif kind == "train" and train is None:
            train = record
        elif kind == "eval" and evaluation is None:
            evaluation = record
        if train is not None and evaluation is not None:
            break
    eval_loss = None if summary is None else _real(summary.get("eval_loss"))
    if eval_loss is None and evaluation is not None:
        eval_loss = _real(evaluation.get("loss"))
    if summary is not None:
        return _integer(summary.get("steps")), _real(summary.get("final_loss")), eval_loss
    if train is not None:
        return _integer(train.get("step")), _real(train.get("loss")), eval_loss
    return None, None, eval_loss


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _real(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def list_runs(root: Path) -> list[RunRecord]:
    """The runs directly under ``root``, by name: its directories (not links) that hold a
    manifest.json or a metrics.jsonl; none when ``root`` does not exist."""
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as err:
        raise DdpimgError(
            f"cannot list the runs in {root} ({err.strerror})",
            hint="give the runs directory read permission, or give --out DIR",
        ) from err
    found = []
    for entry in sorted(entries, key=lambda item: item.name):
        if not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        if os.path.lexists(path / MANIFEST) or os.path.lexists(path / METRICS):
            found.append(read_run(path))
    return found
