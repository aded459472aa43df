"""What ``ddpimg plot`` reads of one run directory (``train --out``, or a script's): every
logged train line, the evaluations, the summary's throughput and the manifest's facts
(world size, trainer, arguments, CPU threads), and the profiled steps' breakdown. No
matplotlib: a sweep or any other reader takes runs from here.

Both files are data a user may have been handed: metrics.jsonl is read line by line within
bounds (``ddpimg.untrusted``), each value the plot uses is checked (a string for a loss, a
negative step: a DdpimgError naming the file, line and key); manifest.json is optional, and
what of it is missing or malformed is left out of the plot, never fatal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpimg.errors import DdpimgError
from ddpimg.run_files import MANIFEST, MANIFEST_LIMIT, MAX_METRICS_LINE, METRICS
from ddpimg.trace_breakdown import StepBreakdown, read_breakdowns
from ddpimg.untrusted import BadInput, parse_json, read_json, read_lines

METRICS_HINT = "metrics.jsonl holds one JSON object a line, as train writes it"


@dataclass(frozen=True)
class TrainPoint:
    """One logged train line: the optimizer step, the global batch's mean loss, and, when the
    line has them, the throughput since the previous line (evaluations left out), the wall
    time since the run's loop started, and the learning rate."""

    step: int
    loss: float
    samples_per_s: float | None = None
    elapsed_s: float | None = None
    lr: float | None = None


@dataclass(frozen=True)
class EvalPoint:
    """One evaluation: where it sits (``step``: None where the line gives neither its step
    nor an epoch the run's steps per epoch can place), its mean loss, accuracy (NaN for a
    script that evaluates none) and the samples it took of how many."""

    step: float | None
    loss: float
    accuracy: float = math.nan
    samples: int | None = None
    set_samples: int | None = None


@dataclass(frozen=True)
class Run:
    """What the plot takes from one run directory. ``samples_per_s``: the summary's steady
    rate (warm-up left out) where it has one, else its overall rate, None for a run without
    a summary (unfinished); ``what``: ``train mnist`` or ``script NAME`` (None: no
    manifest); ``arguments``: manifest.json's flat ``arguments``; ``global_batch``: samples
    a step; ``breakdown``: the profiled step's phases on each rank ([] when not profiled);
    ``cpu_threads``: a CPU rank's intra-op threads (None: a GPU run, or not recorded)."""

    path: Path
    world_size: int | None
    steps: list[TrainPoint] = field(default_factory=list)
    evals: list[EvalPoint] = field(default_factory=list)
    samples_per_s: float | None = None
    what: str | None = None
    arguments: Mapping[str, Any] = field(default_factory=dict)
    global_batch: int | None = None
    breakdown: list[StepBreakdown] = field(default_factory=list)
    cpu_threads: int | None = None
    final_loss: float | None = None  # the summary's: a run may log no train line at all

    @property
    def name(self) -> str:
        """The run's name: its directory's (``runs/latest`` and ``.`` say where they point)."""
        return self.path.resolve().name or str(self.path)


def read_run(path: Path) -> Run:
    """The run in ``path``; a DdpimgError names a missing or bad metrics file."""
    records = _read_records(path)
    summaries = [record for record in records if record["kind"] == "summary"]
    summary = summaries[-1] if summaries else {}
    manifest = _manifest(path)
    world_size = summary.get("world_size")
    if not isinstance(world_size, int):
        world_size = _whole(_section(manifest, "distributed").get("world_size"))
    steps = [_train_point(record) for record in records if record["kind"] == "train"]
    per_epoch = summary.get("steps_per_epoch")
    evals = [
        _eval_point(record, per_epoch, steps)
        for record in records
        if record["kind"] == "eval" and record.get("loss") is not None
    ]
    rate = summary.get("steady_samples_per_s") or summary.get("samples_per_s")
    arguments = manifest.get("arguments")
    return Run(
        path=path,
        world_size=world_size,
        steps=steps,
        evals=evals,
        samples_per_s=float(rate) if rate else None,
        what=_what(manifest),
        arguments=arguments if isinstance(arguments, dict) else {},
        global_batch=_whole(summary.get("global_batch_size"))
        or _whole(manifest.get("global_batch")),
        breakdown=read_breakdowns(path),
        cpu_threads=_whole(_section(manifest, "run_info").get("cpu_threads")),
        final_loss=_optional(summary, "final_loss"),
    )


def _read_records(path: Path) -> list[dict[str, Any]]:
    metrics = path / METRICS
    if not path.is_dir():
        raise DdpimgError(
            f"run directory {path} does not exist", hint="give the --out directories of train runs"
        )
    if not metrics.is_file():
        raise DdpimgError(
            f"run directory {path} has no {METRICS}",
            hint="give the --out directories of train runs (rank 0 writes metrics.jsonl there)",
        )
    records: list[dict[str, Any]] = []
    try:
        for number, line in enumerate(read_lines(metrics, MAX_METRICS_LINE), start=1):
            if not line.strip():
                continue
            try:
                records.append(_record(line))
            except BadInput as err:
                raise DdpimgError(f"{metrics}:{number}: {err}", hint=METRICS_HINT) from err
    except OSError as err:
        raise DdpimgError(f"{metrics}: cannot be read ({err.strerror or err})") from err
    except BadInput as err:  # the file, not a line: binary, or a line without end
        raise DdpimgError(f"{metrics}: {err}", hint=METRICS_HINT) from err
    return records


def _record(line: str) -> dict[str, Any]:
    record = parse_json(line)
    if not isinstance(record, dict) or "kind" not in record:
        raise BadInput(f"expected an object with a 'kind' key, found {line.strip()[:60]!r}")
    _check_record(record)
    return record


# What the plot reads of each kind of line: key -> (kind of value, least value); a key may
# be absent or null. Other kinds of lines, and other keys, are not read.
_NUMBER, _COUNT = "a number", "a whole number"
_READ: dict[str, dict[str, tuple[str, float]]] = {
    "train": {
        "step": (_COUNT, 0),
        "epoch": (_NUMBER, 0),
        "loss": (_NUMBER, -math.inf),
        "samples_per_s": (_NUMBER, 0),
        "elapsed_s": (_NUMBER, 0),
        "lr": (_NUMBER, 0),
    },
    "eval": {
        "step": (_COUNT, 0),
        "epoch": (_NUMBER, 0),
        "loss": (_NUMBER, -math.inf),
        "accuracy": (_NUMBER, -math.inf),
        "samples": (_COUNT, 0),
        "set_samples": (_COUNT, 0),
    },
    "summary": {
        "world_size": (_COUNT, 1),
        "steps_per_epoch": (_COUNT, 1),
        "global_batch_size": (_COUNT, 1),
        "samples_per_s": (_NUMBER, 0),
        "steady_samples_per_s": (_NUMBER, 0),
        "final_loss": (_NUMBER, -math.inf),
    },
}


def _check_record(record: dict[str, Any]) -> None:
    """A BadInput naming the key whose value the plot cannot read (a string for a loss, a
    negative step); a train line also needs its step and loss."""
    fields = _READ.get(record["kind"]) if isinstance(record["kind"], str) else None
    if fields is None:
        return
    if record["kind"] == "train" and (record.get("step") is None or record.get("loss") is None):
        raise BadInput("a train line needs 'step' and 'loss'")
    for key, (kind, least) in fields.items():
        value = record.get(key)
        if value is None:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or (kind == _COUNT and not isinstance(value, int)) or value < least:
            raise BadInput(f"'{key}' is {value!r}, expected {kind} from {least:g}")


def _optional(record: Mapping[str, Any], key: str) -> float | None:
    value = record.get(key)
    return None if value is None else float(value)


def _train_point(record: Mapping[str, Any]) -> TrainPoint:
    return TrainPoint(
        step=record["step"],
        loss=float(record["loss"]),
        samples_per_s=_optional(record, "samples_per_s"),
        elapsed_s=_optional(record, "elapsed_s"),
        lr=_optional(record, "lr"),
    )


def _eval_point(
    record: Mapping[str, Any], steps_per_epoch: int | None, steps: list[TrainPoint]
) -> EvalPoint:
    """An eval line at its step: the line's own, else its epoch's end (from the summary's
    steps per epoch), else the last step logged before it (a run without a summary)."""
    step: float | None = record.get("step")
    epoch = record.get("epoch")
    if step is None and epoch is not None:
        if steps_per_epoch:
            step = epoch * steps_per_epoch
        elif steps:
            step = steps[-1].step
    accuracy = record.get("accuracy")
    return EvalPoint(
        step=None if step is None else float(step),
        loss=float(record["loss"]),
        accuracy=math.nan if accuracy is None else float(accuracy),
        samples=record.get("samples"),
        set_samples=record.get("set_samples"),
    )


def _manifest(path: Path) -> dict[str, Any]:
    """manifest.json as an object; {} when it is absent or unreadable (a plot does without)."""
    try:
        manifest = read_json(path / MANIFEST, MANIFEST_LIMIT)
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def _section(manifest: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    section = manifest.get(name)
    return section if isinstance(section, dict) else {}


def _whole(value: object) -> int | None:
    """``value`` when it is a whole number of at least 1 (not a bool), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return None


def _what(manifest: Mapping[str, Any]) -> str | None:
    """``train TRAINER`` or ``script NAME`` as the manifest says; None when it says neither."""
    script = _section(manifest, "script").get("path")
    if isinstance(script, str) and script:
        return f"script {Path(script).name}"
    trainer = _section(manifest, "arguments").get("trainer")
    return f"train {trainer}" if isinstance(trainer, str) and trainer else None
