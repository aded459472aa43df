"""``--resume auto|PATH|none``: which checkpoint a run continues from, decided by rank 0
and broadcast, so that every rank loads the same one.

- ``auto`` (the default, what a requeued batch job needs): the newest checkpoint of
  ``--out`` that verifies; each invalid newer one is skipped with a warning naming it. No
  checkpoint at all (a fresh ``--out``) starts a new run without a word. An ``--out`` that
  holds an earlier run's ``manifest.json`` but no checkpoint is never replaced silently
  (``check_earlier_run``): the same options that did not complete start over with a
  warning (a job requeued before its first checkpoint), anything else is an error.
- ``PATH``: that checkpoint directory; one that does not verify is an error.
- ``none``: a new run; the checkpoints already in ``--out`` are removed (with a warning),
  so that they cannot be mistaken for this run's later.

The chosen checkpoint must come from the same configuration (``state.fingerprint``);
otherwise the run stops with an error naming each differing option. A run without ``--out``
has its own directory chosen first (``ddpimg.train.run_dir``: a new one, or an earlier run of
the same trajectory, ``same_trajectory``); these rules then apply in it.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ddpimg.errors import DdpimgError, warn
from ddpimg.fsio import check_no_link_out
from ddpimg.run_files import MANIFEST, MANIFEST_LIMIT, METRICS
from ddpimg.runtime.flight_recorder import TRACE_DIR
from ddpimg.trace_breakdown import PROFILE_DIR
from ddpimg.trackers.settings import MLFLOW_DIR, TENSORBOARD_DIR, WANDB_DIR
from ddpimg.train.checkpoint.files import CHECKPOINTS, candidates, verify
from ddpimg.train.checkpoint.state import (
    FREE_TO_CHANGE,
    LOOP_JSON,
    LOOP_JSON_LIMIT,
    CheckpointRecord,
    check_fingerprint,
    fingerprint,
)
from ddpimg.train.tasks import arguments_json
from ddpimg.untrusted import read_json

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.config import TrainConfig

# What a run writes into --out besides manifest.json (replaced by a rename, never written
# through): each must not be a link out of it.
RUN_ENTRIES = (
    CHECKPOINTS, METRICS, TRACE_DIR, PROFILE_DIR, TENSORBOARD_DIR, WANDB_DIR, MLFLOW_DIR,
)  # fmt: skip

AUTO = "auto"
NONE = "none"
PATH_HINT = (
    "give a checkpoint directory written by train (DIR/checkpoints/step-NNNNNNNN), or "
    "--resume auto for the newest valid one in --out"
)


@dataclass(frozen=True)
class Resume:
    """The checkpoint a run continues from. ``in_out``: it is one of ``--out``'s own, so
    ``metrics.jsonl`` there keeps its first ``record.metrics_lines`` lines and goes on."""

    path: Path
    record: CheckpointRecord
    in_out: bool

    def manifest_entry(self) -> dict[str, object]:
        return {"checkpoint": str(self.path), "step": self.record.loop.step}


def read_record(path: Path) -> CheckpointRecord:
    """``loop.json`` of a verified checkpoint."""
    try:
        data = read_json(path / LOOP_JSON, LOOP_JSON_LIMIT)
    except (OSError, ValueError) as err:
        raise DdpimgError(
            f"checkpoint {path}: cannot read {LOOP_JSON} ({err})", hint=PATH_HINT
        ) from err
    return CheckpointRecord.from_json(data, path)


def choose_checkpoint(config: TrainConfig, current: dict[str, Any], stream: TextIO) -> Path | None:
    """Rank 0's choice for ``config.resume`` (warnings on ``stream``); ``current`` is this
    run's fingerprint. Raises a DdpimgError for an invalid PATH or another configuration."""
    root = config.out / CHECKPOINTS
    if config.resume == NONE:
        existing = candidates(root)
        if existing:
            print(
                f"ddpimg: warning: --resume none: removing {len(existing)} checkpoint(s) "
                f"of an earlier run in {root}",
                file=stream,
                flush=True,
            )
            shutil.rmtree(root)
        return None
    if config.resume == AUTO:
        chosen = None
        for path in candidates(root):
            reason = verify(path)
            if reason is None:
                chosen = path
                break
            warn(f"skipping checkpoint {path}: {reason}", stream)
        if chosen is None:
            check_earlier_run(config, current["global_batch"], stream)
            return None
    else:
        chosen = Path(config.resume)
        reason = verify(chosen)
        if reason is not None:
            raise DdpimgError(f"--resume {chosen}: the checkpoint {reason}", hint=PATH_HINT)
    record = read_record(chosen)
    check_fingerprint(record.fingerprint, current, chosen)
    loop = record.loop
    print(
        f"ddpimg: resuming from {chosen} (epoch {loop.epoch}, step {loop.step})",
        file=stream,
        flush=True,
    )
    return chosen


def check_earlier_run(config: TrainConfig, global_batch: int, stream: TextIO) -> None:
    """``--out`` has no checkpoint to continue from: if it holds an earlier run's
    manifest.json, this run would replace it and its metrics.jsonl. That is what a job
    requeued before its first checkpoint needs (the same options and ``global_batch``, not
    completed: a warning on ``stream``); any other earlier run is kept, with a DdpimgError."""
    manifest = config.out / MANIFEST
    try:
        earlier: Any = read_json(manifest, MANIFEST_LIMIT)
    except (FileNotFoundError, NotADirectoryError):
        return  # no earlier run (an --out that cannot be written is told apart later)
    except (OSError, ValueError):
        earlier = None
    status = earlier.get("status") if isinstance(earlier, dict) else None
    same = isinstance(earlier, dict) and same_trajectory(earlier, config, global_batch)
    if same and status != "completed":
        print(
            f"ddpimg: warning: {manifest}: an earlier run of these options ended ({status}) "
            "before its first checkpoint; starting it over",
            file=stream,
            flush=True,
        )
        return
    if status == "completed":
        described = "a completed run"
    elif isinstance(status, str):
        described = f"a {status} run of other options"
    else:
        described = "a run whose manifest.json cannot be read"
    raise DdpimgError(
        f"--out {config.out} holds {described} ({manifest}) and no checkpoint to continue "
        "from: this run would replace its manifest.json and metrics.jsonl",
        hint="use another --out, or --resume none to start over in this one",
    )


def same_trajectory(manifest: Mapping[str, Any], config: TrainConfig, global_batch: int) -> bool:
    """Whether an earlier run's manifest.json is of ``config``'s options but for those free
    to change on resume (``state.FREE_TO_CHANGE``), and of ``global_batch`` (its
    ``global_batch``: the batch options are free to change, the global batch they make is
    not): this run may go on with that run's trajectory."""
    arguments = manifest.get("arguments")
    return (
        isinstance(arguments, Mapping)
        and manifest.get("global_batch") == global_batch
        and _trajectory(arguments) == _trajectory(arguments_json(config))
    )


def _trajectory(arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in arguments.items() if key not in FREE_TO_CHANGE}


def resolve_resume(
    config: TrainConfig,
    ctx: DistContext,
    batch: BatchLayout,
    stream: TextIO,
    task_facts: Mapping[str, int],
) -> Resume | None:
    """The checkpoint every rank continues from, or None for a new run of ``batch``
    (``task_facts``: ``Task.fingerprint``, for the fingerprint). Collective: rank 0
    chooses (``choose_checkpoint``) and broadcasts its choice or its error; then every rank
    must see the same ``--out`` (``check_shared``): checkpoints are written and read by all
    ranks."""
    import torch.distributed as dist

    current = fingerprint(config, batch, task_facts)
    root = config.out / CHECKPOINTS
    probe = root / f".probe-{secrets.token_hex(8)}"
    outcome: list[object] = [None]
    if ctx.is_main:
        try:
            check_no_link_out(config.out, RUN_ENTRIES)
            chosen = choose_checkpoint(config, current, stream)
            root.mkdir(parents=True, exist_ok=True)
            probe.touch()
            outcome = [("ok", None if chosen is None else str(chosen), str(probe))]
        except DdpimgError as err:
            outcome = [("error", err.message, err.hint)]
        except OSError as err:
            # Told to every rank: the others are waiting for the decision.
            outcome = [
                (
                    "error",
                    f"--out {config.out}: cannot write there ({err.strerror}: {err.filename})",
                    "choose a writable directory with --out",
                )
            ]
    dist.broadcast_object_list(outcome, src=0)
    decision = outcome[0]
    if not isinstance(decision, tuple):
        raise RuntimeError(f"rank 0 broadcast {decision!r} instead of a resume decision")
    if decision[0] == "error":
        raise DdpimgError(decision[1], hint=decision[2])
    check_shared(Path(decision[2]), ctx)
    if decision[1] is None:
        return None
    path = Path(decision[1])
    in_out = path.resolve().parent == root.resolve()
    return Resume(path, read_record(path), in_out)


def check_shared(probe: Path, ctx: DistContext) -> None:
    """Every rank looks for ``probe``, a file with a random name that rank 0 just made in
    the checkpoints folder; rank 0 removes it. Raises a DdpimgError (on every rank) naming
    the ranks that do not see it."""
    import torch
    import torch.distributed as dist

    blind = torch.zeros(ctx.world_size, dtype=torch.int32, device=ctx.device)
    blind[ctx.rank] = 0 if probe.exists() else 1
    dist.all_reduce(blind)
    if ctx.is_main:
        probe.unlink()
    missing = [rank for rank, flag in enumerate(blind.tolist()) if flag]
    if missing:
        raise DdpimgError(
            f"rank(s) {', '.join(map(str, missing))} do not see {probe.parent} as rank 0 "
            "does: every rank writes its part of a checkpoint there and reads it on resume",
            hint="put --out on a filesystem that every node mounts at the same path "
            "(home, project or scratch), not on node-local storage such as /tmp",
        )
