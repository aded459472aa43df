"""The GPU runbook: everything GPU-only that ddpimg claims, checked and measured on a CUDA
machine in three commands of at most nine minutes each (docs/benchmarks.md, "GPU runbook";
the steps: benchmarks/runbook/plan.py).

    python benchmarks/gpu_runbook.py --part 1|2|3|all [--dry-run] [--out DIR] [--budget-s S]
        [--jobs N] [--only PATTERN,...] [--matrix sample|full] [--wheels DIR] [--list]
        [--resnet-batch-size N] [--gpt-batch-size N]

On the lent GPU machine, from the repository with the wheel folder carried (``nox -s
device-wheels`` makes it): each part installs the wheels, then runs its steps while its
budget lasts, and writes ``runbook-partN.json`` (every figure), ``runbook-partN.md`` (the
table) and ``runbook-partN.log`` (every command's output tail) into ``--out`` (default:
$OUT, else runs/gpu-runbook), and prints a summary of at most 12,000 characters last.
``--dry-run`` runs the same plan on the CPU at toy sizes (Gloo, fp32 and bf16, tiny models,
a sample of the matrix): what CI runs. ResNet-50 and GPT-124M are measured at the largest
batch that fits on the GPU, searched first, unless ``--resnet-batch-size`` /
``--gpt-batch-size`` give it (the dry run keeps its toy batches). Exit status 1 when a step
failed (a missed goal is not a failure: it is a finding), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from runbook import bench_steps, commands, report
from runbook.commands import PYTHON, RunLog
from runbook.deadline import Deadline
from runbook.model import Context, Outcome, Step
from runbook.plan import PARTS, PLAN, steps_of
from runbook.setup_steps import describe_device

REPO = Path(__file__).resolve().parent.parent
# Nine minutes a part, less what the device tool's own start and transfers take.
DEFAULT_BUDGET_S = 520.0
RESERVE_S = 10.0  # kept back for writing the reports
# The dry run has no device time to fit: its budget and every command's limit only catch
# hangs, so that a slow or busy machine cannot fail it. What it took on a 2-core AMD EPYC
# with other work beside it (2026-11-25, before its synthetic ResNet evaluation shrank: 235 s
# since): all three parts, the longest part, the longest command (DeepSpeed's first start,
# which compiles its op); the guards are 5x those.
DRY_RUN_MEASURED = {"whole_s": 830.0, "part_s": 510.0, "command_s": 300.0}
DRY_RUN_BUDGET_S = 5 * DRY_RUN_MEASURED["part_s"]
DRY_RUN_HANG_GUARD_S = 5 * DRY_RUN_MEASURED["command_s"]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--part", default="all", choices=[*map(str, PARTS), "all"])
    parser.add_argument(
        "--dry-run", action="store_true", help="the same plan on the CPU, toy sizes"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="default: $OUT, else runs/gpu-runbook"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help=f"per part (default {DEFAULT_BUDGET_S:g}; dry run {DRY_RUN_BUDGET_S:g}: a hang guard)",
    )
    parser.add_argument(
        "--jobs", type=int, default=None, help="matrix cells at once (default: 8 GPU, 2 dry run)"
    )
    parser.add_argument("--only", default="", help="comma-separated step or cell patterns")
    parser.add_argument("--matrix", choices=["sample", "full"], default="sample",
                        help="dry run: the sample of CPU cells, or all of them")  # fmt: skip
    parser.add_argument("--wheels", type=Path, default=REPO / ".whl", help="the carried wheels")
    parser.add_argument(
        "--work", type=Path, default=None, help="scratch (default: a temporary one)"
    )
    for model, name in (("resnet", "bench-resnet50"), ("gpt", "bench-gpt124m")):
        parser.add_argument(
            bench_steps.BATCH_FLAGS[model],
            type=int,
            metavar="N",
            help=f"{name}'s batch (default: the largest that fits on the GPU, searched first; "
            "the dry run's toy batch)",
        )
    parser.add_argument("--list", action="store_true", help="print the plan and exit")
    ns = parser.parse_args(argv)
    ns.batches = {
        model: getattr(ns, flag.removeprefix("--").replace("-", "_"))
        for model, flag in bench_steps.BATCH_FLAGS.items()
    }
    for model, given in ns.batches.items():
        if given is not None and given < 1:
            parser.error(f"{bench_steps.BATCH_FLAGS[model]} {given}: give a batch of 1 or more")
    if ns.budget_s is None:
        ns.budget_s = DRY_RUN_BUDGET_S if ns.dry_run else DEFAULT_BUDGET_S
    if ns.budget_s <= RESERVE_S:
        parser.error(
            f"--budget-s {ns.budget_s:g} leaves nothing to run: give more than {RESERVE_S:g}"
        )
    if ns.jobs is not None and ns.jobs < 1:
        parser.error(f"--jobs {ns.jobs}: give 1 or more")
    if ns.out is None:
        ns.out = Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO / "runs" / "gpu-runbook"
    if not ns.dry_run and not ns.list and cuda_devices() == 0:
        parser.error(
            "torch sees no CUDA device here (torch.cuda.device_count() is 0): run this on the "
            "GPU machine, or add --dry-run to run the plan on the CPU"
        )
    return ns


def cuda_devices() -> int:
    probe = subprocess.run(
        [PYTHON, "-c", "import torch; print(torch.cuda.device_count())"],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(probe.stdout.strip() or 0) if probe.returncode == 0 else 0


def plan_table() -> str:
    lines = ["| part | step | goal | GPU estimate | dry-run estimate |", "|---|---|---|---|---|"]
    for step in PLAN:
        parts = ",".join(map(str, step.parts))
        lines.append(f"| {parts} | {step.name} | {step.goal} | {step.estimate_s:.0f} s | "
                     f"{step.dry_estimate_s:.0f} s |")  # fmt: skip
    return "\n".join(lines)


def run_step(step: Step, ctx: Context) -> Outcome:
    refusal = ctx.deadline.refusal(step.estimate(ctx.dry_run))
    if refusal is not None:
        return Outcome("skip", "not run", refusal)
    try:
        outcome = step.run(ctx)
    except Exception as err:  # a broken step must not stop the others
        outcome = Outcome(
            "fail", f"{type(err).__name__}: {err}"[:300], traceback.format_exc()[-3000:]
        )
    importlib.invalidate_caches()  # the install step adds packages this process may import
    return outcome


def run_part(
    part: int,
    ns: argparse.Namespace,
    work: Path,
    earlier: dict[str, report.StepResult],
    facts: dict[str, Any],
) -> list[report.StepResult]:
    """Run the part's steps. ``earlier``: the setup steps (``always``) already run by this
    process for an earlier part (``--part all``): the machine is the same, so they are
    taken over, not run again (on the device each part is a process of its own). ``facts``:
    what steps learn for later ones, in any part."""
    deadline = Deadline(
        ns.budget_s, RESERVE_S, hang_guard_s=DRY_RUN_HANG_GUARD_S if ns.dry_run else None
    )
    json_path = ns.out / f"runbook-part{part}.json"
    ctx = Context(
        dry_run=ns.dry_run,
        repo=REPO,
        out=ns.out,
        work=work / f"part{part}",
        wheels=ns.wheels.resolve(),
        deadline=deadline,
        log=RunLog(ns.out / f"runbook-part{part}.log"),
        jobs=ns.jobs or (2 if ns.dry_run else 8),
        only=tuple(filter(None, ns.only.split(","))),
        full_matrix=ns.matrix == "full",
        facts=facts,
        batches=ns.batches,
    )
    ctx.work.mkdir(parents=True, exist_ok=True)
    header: dict[str, Any] = {
        "runbook": "ddpimg GPU runbook",
        "part": part,
        "dry_run": ns.dry_run,
        "host": socket.gethostname(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "budget_s": ns.budget_s,
    }
    results: list[report.StepResult] = []
    for step in steps_of(part):
        if not step.always and not ctx.selected(step.name):
            continue
        if step.always and step.name in earlier:
            before = earlier[step.name].outcome
            outcome = Outcome(before.status, f"{before.measured} (as in an earlier part)")
            results.append(report.StepResult(step, outcome, 0.0))
            continue
        commands.progress(f"part {part}: {step.name} ...")
        began = time.monotonic()
        outcome = run_step(step, ctx)
        results.append(report.StepResult(step, outcome, time.monotonic() - began))
        if step.always:
            earlier[step.name] = results[-1]
        header["device"] = ctx.facts.get("device", {})
        header["elapsed_s"] = round(deadline.elapsed(), 1)
        report.write_json(json_path, header, results)
        commands.progress(f"part {part}: {step.name}: {outcome.status} ({outcome.measured[:160]})")
    title = part_title(part, ns.dry_run, ctx.facts.get("device", {}), deadline.elapsed())
    (ns.out / f"runbook-part{part}.md").write_text(report.markdown(title, results))
    return results


def part_title(part: int, dry_run: bool, facts: dict[str, Any], elapsed_s: float) -> str:
    where = "dry run on the CPU" if dry_run else describe_device(facts)
    day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    return f"GPU runbook part {part} ({where}, {day}, {elapsed_s:.0f} s)"


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse_args(argv)
    if ns.list:
        print(plan_table())
        return 0
    ns.out.mkdir(parents=True, exist_ok=True)
    parts = PARTS if ns.part == "all" else (int(ns.part),)
    work = ns.work or Path(tempfile.mkdtemp(prefix="ddpimg-runbook-"))
    began = time.monotonic()
    results: list[report.StepResult] = []
    earlier: dict[str, report.StepResult] = {}
    facts: dict[str, Any] = {}
    try:
        for part in parts:
            results += run_part(part, ns, work, earlier, facts)
    finally:
        if ns.work is None:
            shutil.rmtree(work, ignore_errors=True)
    files = [ns.out / f"runbook-part{part}.md" for part in parts]
    where = "dry run on the CPU" if ns.dry_run else describe_device(facts.get("device", {}))
    title = f"GPU runbook, part {ns.part} ({where}, {time.monotonic() - began:.0f} s)"
    print(report.summary(title, results, files), end="", flush=True)
    return 1 if any(r.outcome.status == "fail" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
