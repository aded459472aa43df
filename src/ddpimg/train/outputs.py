"""What rank 0 writes into ``--out``: ``metrics.jsonl`` and ``manifest.json``.

``metrics.jsonl`` gets one JSON object a line, each written whole and flushed, so a crashed
run leaves only complete lines behind; a new run replaces the file, a resumed one keeps the
lines up to its checkpoint and appends. ``manifest.json`` is
written when the run starts (status "running") and replaced atomically at the end (write a
temporary file, fsync, rename) with the final status and exit status, so readers never see
a half-written manifest.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ddpimg.addon.mounted import addon_records
from ddpimg.buildinfo import image_identity, read_build_info
from ddpimg.errors import DdpimgError
from ddpimg.fsio import open_own, write_json_atomic, write_text_atomic
from ddpimg.run_files import MANIFEST, MAX_METRICS_LINE, METRICS
from ddpimg.runtime.run_note import tell_launcher
from ddpimg.train.progress import Progress
from ddpimg.train.tasks import arguments_json
from ddpimg.untrusted import BadInput, read_lines
from ddpimg.version import __version__

if TYPE_CHECKING:
    from ddpimg.runtime.context import DistContext
    from ddpimg.trackers import Trackers
    from ddpimg.train.batch import BatchLayout
    from ddpimg.train.checkpoint import Resume
    from ddpimg.train.config import TrainConfig


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _first_lines(path: Path, count: int) -> list[str]:
    """The first ``count`` complete lines of ``path`` (fewer if it has fewer, or up to one
    that is not a metrics line within bounds; none if it does not exist)."""
    lines: list[str] = []
    try:
        for line in read_lines(path, MAX_METRICS_LINE):
            if len(lines) == count or not line.endswith("\n"):
                break
            lines.append(line)
    except FileNotFoundError:
        return []
    except BadInput:
        pass
    return lines


def collect_versions(env: Mapping[str, str]) -> dict[str, Any]:
    """Versions of everything that decides the numbers a run produces."""
    import torch

    nccl: str | None = None
    if torch.distributed.is_nccl_available():
        try:
            nccl = ".".join(str(part) for part in torch.cuda.nccl.version())  # type: ignore[no-untyped-call]
        except (RuntimeError, AttributeError, TypeError):
            nccl = None
    try:
        deepspeed: str | None = metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        deepspeed = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "deepspeed": deepspeed,
        "ddpimg": __version__,
        "image": read_build_info(env),
    }


class MetricsWriter:
    """``metrics.jsonl``: one JSON object a line, flushed line by line. ``keep_lines``
    (a resumed run) keeps that many lines of the existing file, the ones written up to
    the checkpoint, and appends after them; otherwise the file starts empty. ``sink``
    (the trackers) gets every record once it is in the file."""

    def __init__(
        self,
        path: Path,
        keep_lines: int | None = None,
        sink: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.path = path
        self.sink = sink
        self.lines = 0
        # Opened before anything is read: a link (out of --out) or a FIFO is refused.
        self._stream = open_own(path, append=bool(keep_lines))
        if keep_lines:
            kept = _first_lines(path, keep_lines)
            self._stream.close()
            write_text_atomic(path, "".join(kept))
            self.lines = len(kept)
            self._stream = open_own(path, append=True)

    def write(self, record: Mapping[str, Any]) -> None:
        with self._writing():
            self._stream.write(json.dumps(record) + "\n")
            self._stream.flush()
        self.lines += 1
        if self.sink is not None:
            self.sink(record)

    def sync(self) -> int:
        """Make the lines written so far durable; returns how many there are."""
        with self._writing():
            self._stream.flush()
            os.fsync(self._stream.fileno())
        return self.lines

    def close(self) -> None:
        """Close the file; a line that could not be written (a full disk) is dropped."""
        with contextlib.suppress(OSError):
            self._stream.close()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        try:
            yield
        except OSError as err:
            raise DdpimgError(
                f"{self.path} could not be written ({err.strerror})",
                hint="free space (or quota) on the file system of --out, or use another "
                "--out; then run the same command again: --resume auto continues from the "
                "last checkpoint",
            ) from err


class RunRecorder:
    """Rank 0's outputs for one run: metrics, manifest and progress; ``trackers`` (see
    ``ddpimg.trackers.open_trackers``) get every metrics record and the run's end."""

    def __init__(
        self,
        out: Path,
        manifest: dict[str, Any],
        progress: Progress,
        keep_metrics_lines: int | None = None,
        trackers: Trackers | None = None,
    ) -> None:
        self.out = out
        self.manifest = manifest
        self.progress = progress
        self.trackers = trackers
        sink = None if trackers is None else trackers.record
        self.metrics = MetricsWriter(out / METRICS, keep_metrics_lines, sink)
        write_json_atomic(out / MANIFEST, manifest)
        # train --nproc-per-node's launcher writes its verdict into this manifest too.
        tell_launcher(out)

    @classmethod
    def start(
        cls,
        config: TrainConfig,
        batch: BatchLayout,
        ctx: DistContext,
        env: Mapping[str, str],
        *,
        stream: TextIO,
        resume: Resume | None = None,
    ) -> RunRecorder:
        """Create ``--out`` and write the "running" manifest. A run resumed from one of
        ``--out``'s checkpoints keeps the metrics lines written up to it."""
        versions = collect_versions(env)
        manifest = {
            "status": "running",
            "exit_status": None,
            "started_utc": utc_now(),
            "ended_utc": None,
            "seed": config.seed,
            "arguments": arguments_json(config),
            # What the batch options made of this world size: a run continued in this
            # directory must keep it (checkpoint.resume.same_trajectory).
            "global_batch": batch.global_size,
            "distributed": {
                "world_size": ctx.world_size,
                "num_nodes": ctx.num_nodes,
                "local_world_size": ctx.local_world_size,
                "backend": ctx.backend,
                "device": str(ctx.device),
            },
            "run_info": ctx.run_info,
            "versions": versions,
            "image": image_identity(versions["image"]),
            "addons": addon_records(env),
            "resumed_from": None if resume is None else resume.manifest_entry(),
        }
        resumed = resume is not None and resume.in_out
        keep = resume.record.metrics_lines if resume is not None and resume.in_out else None
        try:
            config.out.mkdir(parents=True, exist_ok=True)
            trackers = _open_trackers(config, manifest, env, resumed, stream)
            return cls(config.out, manifest, Progress(stream), keep, trackers)
        except OSError as err:
            raise DdpimgError(
                f"--out {config.out}: cannot write there ({err.strerror}: {err.filename})",
                hint="choose a writable directory with --out",
            ) from err

    def begin(self, total_steps: int) -> None:
        """The run's length in optimizer steps: the progress line's, and manifest.json's
        ``total_steps`` (by which ``ddpimg follow`` tells the time left)."""
        self.progress.begin(total_steps)
        self.manifest["total_steps"] = total_steps
        write_json_atomic(self.out / MANIFEST, self.manifest)

    def step(self, step: int, epoch: int) -> None:
        self.progress.step(step, epoch)

    def train(
        self,
        epoch: int,
        step: int,
        loss: float,
        samples_per_s: float,
        elapsed_s: float,
        *,
        lr: float | None = None,
        extra: Mapping[str, float | None] | None = None,
    ) -> None:
        """A train line; ``lr``: the learning rate of the step; ``extra`` adds the task's own
        rates (tokens/s, ...)."""
        record: dict[str, Any] = {
            "kind": "train",
            "epoch": epoch,
            "step": step,
            "loss": loss,
            "samples_per_s": samples_per_s,
            "elapsed_s": elapsed_s,
        }
        if lr is not None:
            record["lr"] = lr
        self.metrics.write(record | dict(extra or {}))
        self.progress.train(step, epoch, loss, samples_per_s)

    def eval(
        self,
        epoch: int,
        loss: float,
        accuracy: float,
        *,
        samples: int,
        set_samples: int | None = None,
        step: int | None = None,
    ) -> None:
        """An eval line: the mean loss and accuracy over ``samples`` evaluated samples of an
        evaluation set of ``set_samples`` (the same number when None), after ``step``
        optimizer steps."""
        record: dict[str, Any] = {"kind": "eval", "epoch": epoch}
        if step is not None:
            record["step"] = step
        of = samples if set_samples is None else set_samples
        self.metrics.write(
            record | {"loss": loss, "accuracy": accuracy, "samples": samples, "set_samples": of}
        )
        self.progress.eval(epoch, loss, accuracy, samples=samples, set_samples=of)

    def startup(self, report: Mapping[str, Any]) -> None:
        """Record where the time to the first step went (manifest.json's ``startup``)."""
        self.manifest["startup"] = dict(report)
        write_json_atomic(self.out / MANIFEST, self.manifest)

    def sync_metrics(self) -> int:
        """Make metrics.jsonl durable (a checkpoint records its length); its line count."""
        return self.metrics.sync()

    def summary(self, record: Mapping[str, Any]) -> None:
        self.metrics.write({"kind": "summary", **record})

    def finish(self, status: str, exit_status: int, error: str | None = None) -> None:
        """Close the metrics and replace the manifest with the final one."""
        self.progress.close()
        self.metrics.close()
        self.manifest |= {"status": status, "exit_status": exit_status, "ended_utc": utc_now()}
        if error is not None:
            self.manifest["error"] = error
        try:
            write_json_atomic(self.out / MANIFEST, self.manifest)
        except OSError as err:
            # Best effort: the run's own error (a full disk, often) is the one to report.
            print(
                f"ddpimg: warning: {self.out / MANIFEST} could not be finalised "
                f"({err.strerror}); it still says status running",
                file=sys.stderr,
                flush=True,
            )
        if self.trackers is not None:
            self.trackers.finish(status, exit_status)


def _open_trackers(
    config: TrainConfig,
    manifest: dict[str, Any],
    env: Mapping[str, str],
    resumed: bool,
    stream: TextIO,
) -> Trackers | None:
    """Rank 0's trackers for ``--log-to`` (None without any); the manifest records their
    settings."""
    if not config.log_to:
        return None
    from ddpimg.trackers import check_trackers, open_trackers

    options = config.tracker_options()
    manifest["trackers"] = check_trackers(config.log_to, config.out, env, options).to_json()
    return open_trackers(
        config.log_to, config.out, manifest, env, resumed, options=options, stream=stream
    )
