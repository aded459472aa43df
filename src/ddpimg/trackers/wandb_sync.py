"""Upload the offline W&B runs of a run directory (``--out/wandb/offline-run-*``) with
W&B's own ``wandb sync``, which marks each uploaded run with a ``.wandb.synced`` file next
to its ``run-<id>.wandb`` log and skips marked runs: a repeat uploads nothing. A run that
was resumed offline has one directory per job, all with the same id; ``wandb sync`` given
them together uploads them in order of their start into the one run."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from ddpimg.errors import printable
from ddpimg.trackers.settings import WANDB_DIR
from ddpimg.untrusted import BadInput, files_inside, inside

OFFLINE_RUNS = "offline-run-*"
SYNCED_SUFFIX = ".wandb.synced"


def offline_runs(run: Path) -> list[Path]:
    """The offline W&B run directories of ``run`` (a ``train --out``), oldest first."""
    return sorted(path for path in (run / WANDB_DIR).glob(OFFLINE_RUNS) if path.is_dir())


def uploaded_files(run_directory: Path) -> list[Path]:
    """What ``wandb sync`` uploads of an offline run: its transaction logs (``run-*.wandb``)
    and the files they name, all under ``files/``. A link out of the run directory among
    them is a BadInput (``ddpimg.untrusted``): W&B would upload what it points at. The
    ``logs/`` W&B keeps for itself (its debug log a link into ~/.cache) are not uploaded."""
    found = []
    for log in sorted(run_directory.glob("run-*.wandb")):
        if not inside(log, run_directory):
            raise BadInput(
                f"{printable(str(log))} is a link out of {printable(str(run_directory))}"
            )
        found.append(log.relative_to(run_directory))
    files = run_directory / "files"
    if files.is_dir():
        if not inside(files, run_directory):
            raise BadInput(f"{printable(str(files))} is a link out of the run")
        found += [Path("files") / path for path in files_inside(files)]
    return found


def is_synced(run_directory: Path) -> bool:
    """Whether W&B's sync has marked every transaction log of ``run_directory`` uploaded."""
    logs = list(run_directory.glob("run-*.wandb"))
    return bool(logs) and all(log.with_name(log.name + ".synced").exists() for log in logs)


def wandb_sync_command(directories: list[Path]) -> list[str]:
    """W&B's command line that uploads ``directories`` (W&B's CLI, run by this Python)."""
    return [sys.executable, "-m", "wandb", "sync", *(str(path.resolve()) for path in directories)]


def upload(run: Path, directories: list[Path], env: Mapping[str, str]) -> int:
    """Run W&B's sync on ``directories`` of ``run``; its exit status. Its own output (a line
    per run) is the progress display. It runs in ``run``, so that its log
    (``wandb/logs/debug-sync.*.log``) lands beside the runs, not where ddpimg sync was
    started."""
    return subprocess.run(
        wandb_sync_command(directories),
        env=dict(env),
        cwd=run,
        stdin=subprocess.DEVNULL,
        check=False,
    ).returncode
