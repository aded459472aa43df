"""``runs/latest``, a symbolic link to the run directory started or continued last, and the
way back from what a user types (a run's directory, its name, or ``latest``) to a directory:
what ``ddpimg plot``, ``sync``, ``export`` and ``runs`` take where they read a run (and the
laptop's ``follow`` and ``fetch`` will).

The link is relative (``latest -> mnist-1234567``): the runs root can be moved or mounted
elsewhere. It is replaced atomically (a new link under a temporary name, renamed over the
old), and only if it is a link: a file or directory of that name is the user's and stays.
Followed, it must stay inside the runs root.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from ddpimg.errors import DdpimgError
from ddpimg.runs.names import LATEST, runs_root


def point_latest(root: Path, run: Path, stream: TextIO | None = None) -> bool:
    """Make ``root/latest`` point at ``run`` (a directory directly under ``root``); False,
    with a warning on ``stream``, when it cannot."""
    link = root / LATEST
    temporary = root / f".{LATEST}.{os.getpid()}.tmp"
    try:
        if os.path.lexists(link) and not link.is_symlink():
            raise OSError(f"{link} is not a link ddpimg made")
        temporary.unlink(missing_ok=True)
        os.symlink(run.name, temporary)
        os.replace(temporary, link)
        return True
    except OSError as err:
        temporary.unlink(missing_ok=True)
        reason = err.strerror or str(err)
        print(
            f"ddpimg: warning: {link} left as it is ({reason}); the run is in {run}",
            file=stream or sys.stderr,
            flush=True,
        )
        return False


def resolve_run(text: str, env: Mapping[str, str] = os.environ) -> Path:
    """The run directory ``text`` stands for: an existing path as it is (as before run
    names), else ``latest`` or a run's name under the runs root (``$DDPIMG_RUNS`` or
    ``./runs``); any other path as it is, for the command to say what is wrong with it.
    DdpimgError for a name that names no run."""
    given = Path(text)
    if os.path.lexists(given) or os.sep in text or text in ("", ".", ".."):
        return given
    root = runs_root(env)
    if text == LATEST:
        return _latest(root)
    candidate = root / text
    if candidate.is_dir() and not candidate.is_symlink():
        return candidate
    raise DdpimgError(
        f"{text}: no such run directory, and no run of that name in {root}/",
        hint=f"ddpimg runs lists the runs in {root}/; give a run's directory, its name or {LATEST}",
    )


def _latest(root: Path) -> Path:
    """The directory ``root/latest`` points at, which must be a run directly under ``root``."""
    link = root / LATEST
    try:
        target = os.readlink(link)
    except FileNotFoundError:
        raise DdpimgError(
            f"{LATEST}: {root} has no {LATEST} (no run without --out has started there)",
            hint=f"ddpimg runs lists the runs in {root}/; give a run's directory or name",
        ) from None
    except OSError as err:
        raise DdpimgError(
            f"{LATEST}: {link} is not a link to a run ({err.strerror})",
            hint=f"give a run's directory or name; ddpimg runs lists the runs in {root}/",
        ) from err
    run = root / target
    if os.sep in target or target in ("", ".", "..") or not run.is_dir() or run.is_symlink():
        raise DdpimgError(
            f"{LATEST}: {link} points at {target!r}, not at a run directory in {root}/",
            hint=f"give a run's directory or name; ddpimg runs lists the runs in {root}/",
        )
    return run
