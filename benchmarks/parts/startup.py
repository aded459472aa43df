"""Time to the first training step, by phase.

``train`` records when each phase ended (manifest.json's ``startup``, see
``ddpimg.train.startup``); this part starts it ``repeats`` times per case with one step to
take and reads those marks against its own clock reading just before the process was
started. "python + ddpimg CLI" is from that spawn to the CLI's first line (interpreter,
``site``, ddpimg's imports, argument parsing); with ``--nproc-per-node`` it also holds the
launcher's own start (torch's elastic agent) until rank 0 runs.

The breakdown (``breakdown``): ``train mnist --max-steps 1 --data synthetic`` as a user
types it (the whole process, its evaluation included: since issue 57 a run that stops inside
its first epoch evaluates 1,024 of the 10,000 test samples, before it all of them) against
``python -c pass`` and ``python -c 'import torch'``, interleaved in the same rounds, for
this checkout's ``src`` and optionally another source tree's (``--startup-before``: the
same interpreter and packages, that tree's ddpimg on PYTHONPATH); and the same with
``--eval-samples 64``, the start-up without most of the evaluation. The goal on 2-core
machines (issue 57): the whole process as typed at most 2 s more than torch's import.
"""

from __future__ import annotations

import itertools
import resource
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
# --log-every 1, --out and --resume none), and with its evaluation cut to 64 samples: the
# start-up alone, without most of the evaluation that ends the step.
FIRST_STEP = ["mnist", "--data", "synthetic"]
VARIANTS = {"": [], ", --eval-samples 64": ["--eval-samples", "64"]}
GOAL_OVER_TORCH_S = 2.0
# The breakdown's rows, all but the first from the run's own marks (``split``), so that they
# add up to its whole process even on a loaded machine.
BREAKDOWN = (
    "interpreter (`python -c pass`)",
    "ddpimg's CLI, topology + site, run directory",
    "torch + ddpimg's trainer modules imported",
    "rendezvous (init_process_group)",
    "data (the synthetic set made)",
    "model + optimizer",
    "first step",
    "after the first step: evaluation, checkpoint, exit",
)
SOURCE = HERE.parent / "src"


def _child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(command: list[str]) -> dict[str, float]:
    """Wall and CPU seconds (user + system: less sensitive than wall to a busy machine)."""
    cpu, began = _child_cpu_s(), time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return {"wall": time.perf_counter() - began, "cpu": _child_cpu_s() - cpu}


def split(seconds: dict[str, float], python_s: float) -> dict[str, float]:
    """One run's seconds per row of ``BREAKDOWN``, from its ``phases`` and ``wall`` (the
    whole process) and the same round's ``python -c pass``, to the first step and whole."""
    to_first = seconds["total"]
    parts = [
        python_s,
        seconds["launch"] - python_s + seconds["plan"] + seconds["setup"],
        *(seconds[phase] for phase in ("imports", "process_group", "data", "model")),
        seconds["first_step"],
        seconds["wall"] - to_first,
    ]
    result = dict(zip(BREAKDOWN, parts, strict=True))
    return result | {"to first step": to_first, "whole process": seconds["wall"]}


def breakdown(repeats: int, before: Path | None) -> tuple[list[Row], dict[str, Any]]:
    """Medians over ``repeats`` interleaved rounds of the rows of ``BREAKDOWN`` for this
    checkout (and ``before``'s source tree), the whole process against torch's import."""
    trees = {"after (this checkout)": SOURCE} | ({} if before is None else {"before": before})

    def train(src: Path, extra: list[str]) -> Callable[[], dict[str, float]]:
        # DDPIMG_KEEP_ENV: ddpimg's module-free environment would drop PYTHONPATH.
        env = {"PYTHONPATH": str(src), "DDPIMG_KEEP_ENV": "PYTHONPATH"}

        def once() -> dict[str, float]:
            cpu = _child_cpu_s()
            run = run_train([*FIRST_STEP, *extra], steps=1, warmup=0, extra_env=env)
            return phases(run) | {"wall": run.wall_s, "cpu": _child_cpu_s() - cpu}

        return once

    sides = {
        f"{tree}{variant}": (tree, src, extra)
        for variant, extra in VARIANTS.items()
        for tree, src in trees.items()
    }
    runners: dict[str, Callable[[], dict[str, float]]] = {
        "python": lambda: _timed([PYTHON, "-c", "pass"]),
        "torch": lambda: _timed([PYTHON, "-c", "import torch"]),
    } | {label: train(src, extra) for label, (_, src, extra) in sides.items()}
    runners["torch"]()  # the page cache warm for every side alike
    rounds = interleaved(runners, repeats, "first step", seed=1)
    torch_s = [r["torch"]["wall"] for r in rounds]
    torch_cpu = [r["torch"]["cpu"] for r in rounds]
    rows: list[Row] = []
    record: dict[str, Any] = {
        "command": ["train", *FIRST_STEP, "--max-steps", "1"],
        "python_s": [r["python"]["wall"] for r in rounds],
        "torch_s": torch_s,
        "torch_cpu_s": torch_cpu,
    }
    for label, (tree, src, extra) in sides.items():
        runs = [split(r[label], r["python"]["wall"]) for r in rounds]
        median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        wall = [r[label]["wall"] for r in rounds]
        cpu = [r[label]["cpu"] for r in rounds]
        over = statistics.median(w - t for w, t in zip(wall, torch_s, strict=True))
        ratio = statistics.median(w / t for w, t in zip(wall, torch_s, strict=True))
        cpu_over = statistics.median(c - t for c, t in zip(cpu, torch_cpu, strict=True))
        record[label] = {
            "source": str(src), "runs": runs, "median_s": median, "cpu_s": cpu,
            "over_torch_import_s": over, "ratio_to_torch_import": ratio,
            "cpu_over_torch_import_s": cpu_over,
        }  # fmt: skip
        parts = ", ".join(f"{key} {median[key]:.2f}" for key in BREAKDOWN)
        rows.append(
            (
                f"`train mnist --max-steps 1 --data synthetic{' '.join(['', *extra])}`, "
                f"{tree} (median of {repeats}, seconds)",
                f"whole process **{median['whole process']:.2f} s** = {ratio:.2f}x `python -c "
                f"'import torch'` ({statistics.median(torch_s):.2f} s), {over:.2f} s over it "
                f"(CPU: {statistics.median(cpu):.2f} s, {cpu_over:.2f} s over torch's "
                f"{statistics.median(torch_cpu):.2f}); first step at "
                f"{median['to first step']:.2f} s = {parts}",
                f"<= {GOAL_OVER_TORCH_S:.0f} s over torch's import",
            )
        )
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
