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

from ddpimg.train.startup import PHASES
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

# How the table names ddpimg's phases (ddpimg.train.startup.PHASES, in that order).
LABELS = {
    "launch": "python + ddpimg CLI",
    "plan": "topology + site",
    "imports": "torch imports",
    "process_group": "init_process_group",
    "setup": "strategy imports + run directory",
    "data": "data",
    "model": "model + wrap (DDP broadcast / deepspeed.initialize)",
    "first_step": "first step",
}
assert tuple(LABELS) == PHASES, "a phase of ddpimg.train.startup has no label here"


def phases(run: TrainRun) -> dict[str, float]:
    """Seconds per phase, the first from this driver's spawn time, and the total."""
    marks = run.manifest["startup"]["marks"]
    seconds = {PHASES[0]: marks[PHASES[0]] - run.spawned}
    for previous, phase in itertools.pairwise(PHASES):
        seconds[phase] = marks[phase] - marks[previous]
    seconds["total"] = marks[PHASES[-1]] - run.spawned
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
        parts = ", ".join(f"{LABELS[key]} {median[key]:.2f}" for key in PHASES)
        rows.append(
            (
                f"time to first step, {case} (median of {repeats}, seconds)",
                f"**{median['total']:.2f} s** (min {min(r['total'] for r in runs):.2f}, max "
                f"{max(r['total'] for r in runs):.2f}) = {parts}",
                "",
            )
        )
    return rows, record
