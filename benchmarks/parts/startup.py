"""Time to the first training step, by phase.

``train`` records when each phase ended (manifest.json's ``startup``, see
``ddpimg.train.startup``); this part starts it ``repeats`` times per case with one step to
take and reads those marks against its own clock reading just before the process was
started. "python + ddpimg CLI" is from that spawn to the CLI's first line (interpreter,
``site``, ddpimg's imports, argument parsing); with ``--nproc-per-node`` it also holds the
launcher's own start (torch's elastic agent) until rank 0 runs.

The breakdown (``breakdown``): ``train mnist --max-steps 1 --data synthetic`` as a user
types it (the whole process, its evaluation of 10,000 samples included) against
``python -c pass`` and ``python -c 'import torch'``, interleaved in the same rounds, for
this checkout's ``src`` and optionally another source tree's (``--startup-before``: the
same interpreter and packages, that tree's ddpimg on PYTHONPATH). The issue's goal on
2-core machines: the whole process at most 3 s more than torch's import.
"""

from __future__ import annotations

import itertools
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddpimg.train.startup import PHASES
from parts.common import HERE, PYTHON, Row, TrainRun, interleaved, log, run_train

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


# The breakdown's run, as a user types it (run_train adds --epochs 1, --warmup-steps 0,
# --log-every 1, --out and --resume none).
FIRST_STEP = ["mnist", "--data", "synthetic"]
GOAL_OVER_TORCH_S = 3.0
# The breakdown's rows, from a run's marks: (label, phases summed). "ddpimg's own" is
# launch + plan + imports + setup less `python -c 'import torch'` (added in ``split``).
BREAKDOWN = (
    ("interpreter (`python -c pass`)", ()),
    ("torch import (`python -c 'import torch'` less the interpreter)", ()),
    ("ddpimg's own: CLI, topology + site, its imports, run directory", ()),
    ("rendezvous (init_process_group)", ("process_group",)),
    ("data (the synthetic set made)", ("data",)),
    ("model + optimizer (torch's optimizer imports Dynamo)", ("model",)),
    ("first step", ("first_step",)),
    ("after the first step: evaluation, checkpoint, exit", ()),
)
SOURCE = HERE.parent / "src"


def _wall(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - began


def split(seconds: dict[str, float], python_s: float, torch_s: float) -> dict[str, float]:
    """One run's seconds per breakdown row, from its ``phases`` and ``wall`` (the whole
    process) and the same round's ``python -c pass`` and ``python -c 'import torch'``."""
    to_first = seconds["total"]
    own = sum(seconds[p] for p in ("launch", "plan", "imports", "setup")) - torch_s
    parts = [python_s, torch_s - python_s, own]
    parts += [sum(seconds[p] for p in summed) for _, summed in BREAKDOWN[3:7]]
    parts.append(seconds["wall"] - to_first)
    result = {label: value for (label, _), value in zip(BREAKDOWN, parts, strict=True)}
    return result | {"to first step": to_first, "whole process": seconds["wall"]}


def breakdown(repeats: int, before: Path | None) -> tuple[list[Row], dict[str, Any]]:
    """Medians over ``repeats`` interleaved rounds of the rows of ``BREAKDOWN`` for this
    checkout (and ``before``'s source tree), the whole process against torch's import."""
    trees = {"after (this checkout)": SOURCE} | ({} if before is None else {"before": before})

    def train(src: Path) -> Callable[[], dict[str, float]]:
        # DDPIMG_KEEP_ENV: ddpimg's module-free environment would drop PYTHONPATH.
        env = {"PYTHONPATH": str(src), "DDPIMG_KEEP_ENV": "PYTHONPATH"}

        def once() -> dict[str, float]:
            run = run_train(FIRST_STEP, steps=1, warmup=0, extra_env=env)
            return phases(run) | {"wall": run.wall_s}

        return once

    runners: dict[str, Callable[[], Any]] = {
        "python": lambda: _wall([PYTHON, "-c", "pass"]),
        "torch": lambda: _wall([PYTHON, "-c", "import torch"]),
    } | {label: train(src) for label, src in trees.items()}
    runners["torch"]()  # the page cache warm for every side alike
    rounds = interleaved(runners, repeats, "first step", seed=1)
    rows: list[Row] = []
    record: dict[str, Any] = {"command": ["train", *FIRST_STEP, "--max-steps", "1"]}
    torch_s = statistics.median(r["torch"] for r in rounds)
    for label, src in trees.items():
        runs = [split(r[label], r["python"], r["torch"]) for r in rounds]
        median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        over = [run["whole process"] - r["torch"] for run, r in zip(runs, rounds, strict=True)]
        ratio = statistics.median(
            run["whole process"] / r["torch"] for run, r in zip(runs, rounds, strict=True)
        )
        record[label] = {
            "source": str(src), "runs": runs, "median_s": median,
            "over_torch_import_s": over, "ratio_to_torch_import": ratio,
        }  # fmt: skip
        parts = ", ".join(f"{key} {median[key]:.2f}" for key, _ in BREAKDOWN)
        rows.append(
            (
                f"`train mnist --max-steps 1 --data synthetic`, {label} (median of {repeats}, "
                "seconds)",
                f"whole process **{median['whole process']:.2f} s** = "
                f"{ratio:.2f}x `python -c 'import torch'` ({torch_s:.2f} s), "
                f"{statistics.median(over):.2f} s over it; first step at "
                f"{median['to first step']:.2f} s = {parts}",
                f"<= {GOAL_OVER_TORCH_S:.0f} s over torch's import",
            )
        )
    record["python_s"] = [r["python"] for r in rounds]
    record["torch_s"] = [r["torch"] for r in rounds]
    return rows, record


def run(repeats: int, before: Path | None = None) -> tuple[list[Row], dict[str, Any]]:
    rows, first_step = breakdown(repeats, before)
    record: dict[str, Any] = {"breakdown": first_step}
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
