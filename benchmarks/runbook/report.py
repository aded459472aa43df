"""What a part leaves: one JSON document (every figure), one markdown table (every row, then
the details of what failed or was skipped), and a summary for stdout that fits in the
12,000 characters the device tool's reply keeps of a command's output."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runbook.model import STATUSES, Outcome, Row, Step

SUMMARY_LIMIT = 12_000
MEASURED_CHARS = 240  # of a row's figures in the summary (the table file has them whole)
DETAIL_CHARS = 500


@dataclass(frozen=True)
class StepResult:
    step: Step
    outcome: Outcome
    seconds: float

    def rows(self) -> list[Row]:
        """The step's own row, then its parts' (a matrix step's cells)."""
        own = Row(
            self.step.name,
            self.step.goal,
            self.outcome.measured,
            self.outcome.status,
            self.outcome.detail,
        )
        return [own, *self.outcome.rows]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.step.name,
            "goal": self.step.goal,
            "status": self.outcome.status,
            "measured": self.outcome.measured,
            "detail": self.outcome.detail,
            "seconds": round(self.seconds, 1),
            "record": self.outcome.record,
            "rows": [asdict(row) for row in self.outcome.rows],
        }


def document(header: dict[str, Any], results: Sequence[StepResult]) -> dict[str, Any]:
    return header | {"steps": [result.to_json() for result in results]}


def write_json(path: Path, header: dict[str, Any], results: Sequence[StepResult]) -> None:
    """Written after every step: a part killed from outside loses only the step it was in."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document(header, results), indent=1, default=str) + "\n")
    temporary.replace(path)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def counts(rows: Sequence[Row]) -> str:
    found = {status: sum(row.status == status for row in rows) for status in STATUSES}
    return ", ".join(f"{number} {status}" for status, number in found.items() if number)


def markdown(title: str, results: Sequence[StepResult]) -> str:
    rows = [row for result in results for row in result.rows()]
    lines = [f"# {title}", "", f"{counts(rows)}.", "", "| step | goal | measured | result |",
             "|---|---|---|---|"]  # fmt: skip
    lines += [
        f"| {_cell(r.name)} | {_cell(r.goal)} | {_cell(r.measured)} | {r.status} |" for r in rows
    ]
    explained = [row for row in rows if row.detail and row.status != "pass"]
    if explained:
        lines += ["", "## What failed, missed or did not run", ""]
        for row in explained:
            lines += [f"### {row.name}: {row.status}", "", "```", row.detail.strip(), "```", ""]
    return "\n".join(lines) + "\n"


def summary(title: str, results: Sequence[StepResult], files: Sequence[Path]) -> str:
    """The lines printed last: every step's row; of a matrix step's cells only those that
    did not pass (the passing ones are counted in its row); then the details of what
    failed, as far as the limit allows. Never longer than SUMMARY_LIMIT."""
    rows = [row for result in results for row in result.rows()]
    shown = [
        r
        for result in results
        for r in result.rows()
        if r.name == result.step.name or r.status != "pass"
    ]
    footer = f"\nfull table and details: {', '.join(str(path) for path in files)}\n"
    lines = [f"{title}: {counts(rows)}", "", "| step | result | measured |", "|---|---|---|"]
    lines += [
        f"| {_cell(r.name)} | {r.status} | {_cell(r.measured)[:MEASURED_CHARS]} |" for r in shown
    ]
    details = [f"- {r.name} ({r.status}): {_cell(r.detail)[:DETAIL_CHARS]}"
               for r in shown if r.detail and r.status in ("fail", "miss")]  # fmt: skip
    if details:
        lines += ["", "failures:", *details]
    text = ""
    for number, line in enumerate(lines):
        cut = f"... {len(lines) - number} more lines cut at {SUMMARY_LIMIT} characters"
        if len(text) + len(line) + 1 + len(cut) + len(footer) + 1 > SUMMARY_LIMIT:
            text += cut + "\n"
            break
        text += line + "\n"
    return (text + footer)[:SUMMARY_LIMIT]
