"""What the plot says about its runs in words: a run's options as ``train`` flags, the title
of one run (its name, trainer, world size and the options it was given), and the legend of
several, which names what differs between them (the options that differ, not the
directories) and what they share.

A run's options are manifest.json's ``arguments`` against ``train``'s defaults, less those
that do not change the numbers a run produces (where it writes, how it checkpoints and
logs to trackers), with the world size and the global batch in front: the two facts a
scaling comparison is about. The values come from a file, so each is shown escaped and
cut short.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddpimg.errors import printable
from ddpimg.plot.run import Run
from ddpimg.train.config import TrainConfig

PROCESSES = "processes"
GLOBAL_BATCH = "global batch"
# Arguments that do not decide the numbers a run produces; the batch options are shown as
# the global batch they made.
_NOT_SHOWN = frozenset(
    {
        "trainer",
        "out",
        "resume",
        "log_to",
        "project",
        "run_name",
        "run_group",
        "wandb_entity",
        "keep_checkpoints",
        "checkpoint_every",
        "preempt_signals",
        "preempt_check_every",
        "profile_steps",
        "memory_snapshot",
        "batch_size",
        "global_batch_size",
    }
)
# ``train``'s defaults; the precision as a run records it on the CPU (auto resolved).
_DEFAULTS: Mapping[str, Any] = TrainConfig(precision="fp32").to_json()
_VALUE_CHARS = 40
TITLE_CHARS = 160


def facts(run: Run) -> dict[str, Any]:
    """Everything that may tell ``run`` from another: processes, global batch, then every
    argument that changes the numbers, as recorded."""
    known = {PROCESSES: run.world_size, GLOBAL_BATCH: run.global_batch}
    return known | {
        key: value for key, value in sorted(run.arguments.items()) if key not in _NOT_SHOWN
    }


def given(run: Run) -> dict[str, Any]:
    """The run's arguments that differ from ``train``'s defaults (an option of a trainer:
    given at all), the world size and the global batch left out."""
    return {
        key: value
        for key, value in facts(run).items()
        if key not in (PROCESSES, GLOBAL_BATCH) and value != _DEFAULTS.get(key)
    }


def differing(runs: Sequence[Run]) -> list[str]:
    """The facts whose values are not the same for every run, in ``facts``' order."""
    every = [facts(run) for run in runs]
    keys = list(dict.fromkeys(key for one in every for key in one))
    return [key for key in keys if len({_shown(one.get(key)) for one in every}) > 1]


def labels(runs: Sequence[Run]) -> list[str]:
    """Each run's legend entry: the facts that differ between the runs (``--lr 0.5,
    2 processes``); the run's name where they are the same, and after it where two runs
    would read alike."""
    keys = differing(runs)
    texts = [", ".join(describe(key, facts(run).get(key)) for key in keys) for run in runs]
    repeated = {text for text in texts if texts.count(text) > 1}
    return [
        (f"{text} ({run.name})" if text in repeated else text) if text else run.name
        for run, text in zip(runs, texts, strict=True)
    ]


def title(runs: Sequence[Run]) -> str:
    """One run: its name, what ran, its world size and global batch, and (a second line) the
    options it was given. Several: what they share, the legend telling them apart."""
    keys = set(differing(runs))
    shared = {key: value for key, value in facts(runs[0]).items() if key not in keys}
    head = [describe(key, shared.get(key)) for key in (PROCESSES, GLOBAL_BATCH)]
    options = " ".join(
        describe(key, value)
        for key, value in shared.items()
        if key not in (PROCESSES, GLOBAL_BATCH) and value != _DEFAULTS.get(key)
    )
    known = ", ".join(part for part in head if part)
    if len(runs) == 1:
        line = f"{printable(runs[0].name)}: {runs[0].what or 'a run'}"
        line += f", {known}" if known else ""
    else:
        whats = sorted({run.what for run in runs if run.what})
        line = f"{len(runs)} runs" + (f" of {' / '.join(whats)}" if whats else "")
        line += f", all with {known}" if known else ""
    return _cut(line) + (f"\n{_cut(options)}" if options else "")


def describe(key: str, value: Any) -> str:
    """One fact as a user would write it: ``2 processes``, ``global batch 64``,
    ``--lr 0.5``, ``--deterministic``; an option left out reads ``--lr default``."""
    if key == PROCESSES:
        return "" if value is None else f"{value} process" + ("" if value == 1 else "es")
    if key == GLOBAL_BATCH:
        return "" if value is None else f"global batch {value}"
    flag = "--" + printable(key).replace("_", "-")
    if value is True:
        return flag
    if value is False:
        return f"no {flag}"
    if value is None:
        return f"{flag} default"
    return f"{flag} {_shown(value)}"


def _shown(value: Any) -> str:
    """A value as text: lists comma-separated, escaped, at most ``_VALUE_CHARS``."""
    text = printable(",".join(map(str, value)) if isinstance(value, list) else str(value))
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 3] + "..."


def _cut(text: str) -> str:
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 3] + "..."
