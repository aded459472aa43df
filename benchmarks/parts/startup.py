"""Time to the first training step, by phase.

``train`` records when each phase ended (manifest.json's ``startup``, see
``ddpimg.train.startup``); this part starts it ``repeats`` times per case with one step to
take and reads those marks against its own clock reading just before the process was
started. "python + ddpimg CLI" is from that spawn to the CLI's first line (interpreter,
``site``, ddpimg's imports, argument parsing); with ``--nproc-per-node`` it also holds the
launcher's own start (torch's elastic agent) until rank 0 runs.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

from parts.common import Row, TrainRun, log, run_train

CASES: dict[str, list[str]] = {
    "mnist, 1 process": ["mnist", "--batch-size", "64", "--train-samples", "6400"],
    "mnist, 2 local workers (--nproc-per-node 2)": [
        "mnist", "--batch-size", "64", "--train-samples", "6400", "--nproc-per-node", "2",
    ],
    "gpt-tiny, 1 process": [
        "gpt", "--size", "tiny", "--batch-size", "32", "--train-samples", "4000",
    ],
    "gpt-tiny, deepspeed ZeRO-1, 1 process": [
        "gpt", "--size", "tiny", "--batch-size", "32", "--train-samples", "4000",
        "--strategy", "deepspeed", "--zero-stage", "1",
    ],
}  # fmt: skip
EVAL_SAMPLES = ["--eval-samples", "64"]

# (label, how to get the seconds from a run)
PHASES: list[tuple[str, str]] = [
    ("python + ddpimg CLI", "launch"),
    ("topology + site", "plan"),
    ("torch imports", "imports"),
    ("init_process_group", "process_group"),
    ("strategy imports + run directory", "setup"),
    ("data", "data"),
    ("model + wrap (DDP broadcast / deepspeed.initialize)", "model"),
    ("first step", "first_step"),
]


def phases(run: TrainRun) -> dict[str, float]:
    """Seconds per phase, the first from this driver's spawn time, and the total."""
    marks = run.manifest["startup"]["marks"]
    seconds = {"launch": marks["launch"] - run.spawned}
    for (_, previous), (_, phase) in itertools.pairwise(PHASES):
        seconds[phase] = marks[phase] - marks[previous]
    seconds["total"] = marks["first_step"] - run.spawned
    return seconds


def run(repeats: int) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    record: dict[str, Any] = {}
    for case, arguments in CASES.items():
        runs = []
        for repeat in range(repeats):
            runs.append(phases(run_train([*arguments, *EVAL_SAMPLES], steps=1, warmup=0)))
            log(f"startup {case} {repeat + 1}/{repeats}: {runs[-1]}")
        median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        record[case] = {"runs": runs, "median_s": median}
        parts = ", ".join(f"{label} {median[key]:.2f}" for label, key in PHASES)
        rows.append(
            (
                f"time to first step, {case} (median of {repeats}, seconds)",
                f"**{median['total']:.2f} s** (min {min(r['total'] for r in runs):.2f}, max "
                f"{max(r['total'] for r in runs):.2f}) = {parts}",
                "",
            )
        )
    return rows, record
