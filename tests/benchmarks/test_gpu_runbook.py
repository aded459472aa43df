"""The GPU runbook (benchmarks/gpu_runbook.py): its dry run, the same plan as on a GPU run on
the CPU at toy sizes, every part in one process (marked ``runbook``: about 5 minutes, so
`nox -s runbook-dry-run` runs it, before a GPU session and after a change to benchmarks/,
and the unit session leaves it out); and its pure pieces: the budget, the summary's limit,
the step and cell selection, the comparisons.

No verdict here depends on the machine's speed: the dry run's budget and its commands'
limits are hang guards (gpu_runbook.py's DRY_RUN_*), and so is DRY_RUN_GUARD_S below."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from gpu_runbook import DRY_RUN_MEASURED
from runbook import report
from runbook.commands import Ran
from runbook.deadline import Deadline
from runbook.matrix import first_difference, loss_falls, one_rank_cells, two_rank_cells
from runbook.model import Context, Outcome
from runbook.plan import PARTS, PLAN, steps_of

RUNBOOK = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_runbook.py"
# The steps that need a GPU to say anything; in the dry run they run as far as the CPU allows.
NO_GPU = "dry run: no GPU"
# A hang guard on the whole dry run (every part): more than 5x the DRY_RUN_WHOLE_S it took.
DRY_RUN_GUARD_S = 5 * DRY_RUN_MEASURED["whole_s"]


@dataclass(frozen=True)
class DryRun:
    proc: subprocess.CompletedProcess[str]
    out: Path
    wall_s: float

    def part(self, number: int) -> dict[str, Any]:
        document: dict[str, Any] = json.loads((self.out / f"runbook-part{number}.json").read_text())
        return document

    def step(self, number: int, name: str) -> dict[str, Any]:
        return next(s for s in self.part(number)["steps"] if s["name"] == name)


def runbook(*args: str, timeout: float = DRY_RUN_GUARD_S) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if name != "OUT"}
    return subprocess.run(
        [sys.executable, str(RUNBOOK), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    out = tmp_path_factory.mktemp("runbook")
    began = time.monotonic()
    proc = runbook("--dry-run", "--part", "all", "--out", str(out))
    return DryRun(proc, out, time.monotonic() - began)


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.runbook
@pytest.mark.torchrun
@pytest.mark.deepspeed
def test_the_dry_run_runs_every_step_of_the_plan(dry_run: DryRun, part: int) -> None:
    assert dry_run.proc.returncode == 0, dry_run.proc.stdout[-3000:] + dry_run.proc.stderr[-3000:]
    document = dry_run.part(part)
    assert document["dry_run"] is True
    assert [step["name"] for step in document["steps"]] == [s.name for s in steps_of(part)]
    for step in document["steps"]:
        rows = [step, *step["rows"]]
        for row in rows:
            # What needs a GPU says so; everything else passes on the CPU.
            assert row["status"] == "pass" or row["detail"].startswith(NO_GPU), row


@pytest.mark.runbook
@pytest.mark.torchrun
@pytest.mark.deepspeed
def test_every_sampled_cell_resumed_and_repeated_bitwise(dry_run: DryRun) -> None:
    cells = {
        **dry_run.step(2, "matrix")["record"],
        **dry_run.step(1, "matrix-two-ranks")["record"],
    }
    expected = [f"matrix/{c.name}" for c in one_rank_cells(dry_run=True, full=False)]
    expected += [f"matrix-two-ranks/{c.name}" for c in two_rank_cells(dry_run=True)]
    assert sorted(cells) == sorted(expected)
    rows = dry_run.step(2, "matrix")["rows"] + dry_run.step(1, "matrix-two-ranks")["rows"]
    for row in rows:
        assert "same" in row["measured"]
        assert "repeat: bitwise" in row["measured"]
    for record in cells.values():
        assert len(record["seconds"]) == 3  # train, resume, repeat
        assert loss_falls(record["losses"])


@pytest.mark.runbook
@pytest.mark.torchrun
@pytest.mark.deepspeed
def test_the_flight_record_names_the_rank_that_never_joined(dry_run: DryRun) -> None:
    step = dry_run.step(1, "flight-recorder")
    assert step["record"]["torchfrtrace"]["missing ranks"] == "{1}"
    stuck = step["record"]["stuck"]
    assert stuck["rank_1"] == []
    assert len(stuck["rank_0"]) == 1


@pytest.mark.runbook
@pytest.mark.torchrun
@pytest.mark.deepspeed
def test_the_tables_hold_every_row_and_the_summary_fits(dry_run: DryRun) -> None:
    summary = dry_run.proc.stdout
    assert len(summary) <= report.SUMMARY_LIMIT
    for part in PARTS:
        table = (dry_run.out / f"runbook-part{part}.md").read_text()
        for step in dry_run.part(part)["steps"]:
            assert f"| {step['name']} |" in table
            assert f"| {step['name']} |" in summary
            for row in step["rows"]:
                assert f"| {row['name']} |" in table
        assert f"runbook-part{part}.md" in summary
    # Every command a step starts itself is logged with its exit and its output's tail.
    log = (dry_run.out / "runbook-part1.log").read_text()
    assert "-m pytest -m gpu tests" in log
    assert "# exit 0," in log
    print(f"dry run of every part: {dry_run.wall_s:.0f} s")


def test_a_budget_too_small_for_every_step_skips_them_all(tmp_path: Path) -> None:
    proc = runbook("--dry-run", "--part", "3", "--budget-s", "11", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    steps = json.loads((tmp_path / "runbook-part3.json").read_text())["steps"]
    assert [step["name"] for step in steps] == [step.name for step in steps_of(3)]
    for step in steps:
        assert step["status"] == "skip"
        assert step["detail"].startswith("budget: needs about"), step


def test_a_budget_under_the_reserve_is_refused(tmp_path: Path) -> None:
    proc = runbook("--dry-run", "--budget-s", "5", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "--budget-s 5 leaves nothing to run: give more than 10" in proc.stderr


def test_a_command_is_killed_by_its_limit_or_the_budget_and_says_which() -> None:
    now = [0.0]
    deadline = Deadline(100, 10, clock=lambda: now[0])
    assert deadline.command_limit(30) == (30, "its hang guard of 30 s")
    assert deadline.command_limit(None) == (90, "the part's budget")
    now[0] = 80.0
    assert deadline.command_limit(30) == (10, "the part's budget")
    guarded = Deadline(100, 10, clock=lambda: now[0], hang_guard_s=5)
    assert guarded.command_limit(30) == (5, "its hang guard of 5 s")
    killed = Ran(("train",), None, "", "", 5.2, "its hang guard of 5 s")
    assert killed.verdict() == "killed by its hang guard of 5 s after 5 s"


def test_the_deadline_refuses_what_does_not_fit() -> None:
    now = [100.0]
    deadline = Deadline(60, 10, clock=lambda: now[0])
    assert deadline.refusal(50) is None
    now[0] = 130.0
    assert deadline.refusal(20) is None
    assert deadline.refusal(21) == "budget: needs about 21 s, 20 s left"
    now[0] = 200.0
    assert deadline.refusal(1) == "budget: needs about 1 s, 0 s left"


@pytest.mark.parametrize(
    ("patterns", "name", "selected"),
    [
        ((), "matrix/gpt/zero1/bf16", True),
        (("matrix",), "matrix", True),
        (("matrix",), "matrix/gpt/zero1/bf16", True),
        (("matrix",), "matrix-two-ranks", False),
        (("matrix/gpt/*",), "matrix", True),
        (("matrix/gpt/*",), "matrix/gpt/zero1/bf16", True),
        (("matrix/gpt/*",), "matrix/mnist/ddp/fp32", False),
        (("matrix/*/*/fp16",), "matrix/toy/fsdp/fp16", True),
        (("matrix/*/*/fp16",), "matrix/toy/fsdp/bf16", False),
        (("doctor*",), "doctor-two-ranks", True),
        (("doctor*",), "flight-recorder", False),
    ],
)
def test_only_selects_steps_and_cells(patterns: tuple[str, ...], name: str, selected: bool) -> None:
    context = Context(
        dry_run=True,
        repo=Path("."),
        out=Path("."),
        work=Path("."),
        wheels=Path("."),
        deadline=Deadline(60, 10),
        log=None,  # type: ignore[arg-type]  # selection never logs
        jobs=1,
        only=patterns,
    )
    assert context.selected(name) is selected


def test_the_summary_never_exceeds_the_limit() -> None:
    long_text = "figures " * 200
    results = [
        report.StepResult(step, Outcome("fail", long_text, long_text), 1.0) for step in PLAN
    ] * 20
    summary = report.summary("title", results, [Path("part1.md")])
    assert len(summary) <= report.SUMMARY_LIMIT
    assert "more lines cut at 12000 characters" in summary
    assert summary.endswith("full table and details: part1.md\n")


@pytest.mark.parametrize(
    ("got", "want", "difference"),
    [
        ({5: 1.25, 6: 1.0}, {5: 1.25, 6: 1.0}, None),
        ({5: 1.25, 6: 1.0000001}, {5: 1.25, 6: 1.0}, "step 6: 1.0000001 vs 1.0 (rel 1.0e-07)"),
        ({6: 1.0}, {5: 1.25, 6: 1.0}, "steps [6], expected [5, 6]"),
    ],
)
def test_losses_must_agree_bitwise(
    got: dict[int, float], want: dict[int, float], difference: str | None
) -> None:
    assert first_difference(got, want) == difference


@pytest.mark.parametrize(
    ("losses", "falls"),
    [
        ([2.3, 2.4, 2.0, 1.9], True),
        ([2.3, 2.4, 2.4, 2.5], False),
        ([2.3, float("nan"), 2.0, 1.9], False),
        ([2.3, 2.0], False),
    ],
)
def test_the_loss_falls_when_its_last_steps_are_below_its_first(
    losses: list[float], falls: bool
) -> None:
    assert loss_falls(losses) is falls


def test_the_gpu_matrix_is_the_whole_product_bf16_first() -> None:
    cells = one_rank_cells(dry_run=False, full=True)
    assert len(cells) == len({c.name for c in cells}) == 4 * 6 * 3
    precisions = [cell.precision for cell in cells]
    assert precisions.index("fp16") > precisions.index("fp32") > precisions.index("bf16") == 0
