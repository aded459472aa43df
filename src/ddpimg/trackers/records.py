"""What a tracker is given: a metrics.jsonl record as named scalars at a step, and the
manifest as flat run parameters. Pure; shared by every tracker so that they all show the
same names: ``<kind>/<field>`` (``train/loss``, ``eval/accuracy``, ``summary/final_loss``)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

# Fields that place a record rather than measure something.
_AXES = ("kind", "step")
# Manifest entries that describe how the run ended, not what it was: the trackers get the
# end as a status of their own.
_NOT_PARAMETERS = frozenset(
    {"status", "exit_status", "ended_utc", "error", "preemption", "rank_lost", "startup"}
)
# MLflow's limit for a parameter's value (the smallest of the three trackers').
MAX_PARAMETER_CHARS = 6000


class Scalars(NamedTuple):
    """A record's numbers; ``step`` is the optimizer step they belong to (None: the record
    names none, e.g. an eval line of a script that does not say)."""

    step: int | None
    values: dict[str, float]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def scalars(record: Mapping[str, Any]) -> Scalars:
    """``record``'s finite numbers named ``<kind>/<field>``; a summary's step is its
    ``steps``."""
    kind = str(record.get("kind", "metrics"))
    step = record.get("step", record.get("steps") if kind == "summary" else None)
    values = {
        f"{kind}/{key}": float(value)
        for key, value in record.items()
        if key not in _AXES and _is_number(value) and math.isfinite(value)
    }
    return Scalars(int(step) if _is_number(step) else None, values)


def _flat(prefix: str, value: Any) -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _flat(f"{prefix}.{key}" if prefix else str(key), item)
    elif value is not None:
        text = value if isinstance(value, str) else json.dumps(value)
        yield prefix, text[:MAX_PARAMETER_CHARS]


def description(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's description of the run (versions, topology, arguments, seed, ...):
    what W&B takes as the run's config, nested as it is."""
    return {key: value for key, value in manifest.items() if key not in _NOT_PARAMETERS}


def parameters(described: Mapping[str, Any]) -> dict[str, str]:
    """A ``description`` as dotted names and text values (``versions.torch``,
    ``distributed.world_size``): MLflow's parameters, TensorBoard's config table."""
    return dict(_flat("", described))
