"""What Slurm says of a job (``scontrol show job -o``), read without trusting it: only the
fields follow needs, each checked against the form Slurm gives it; a field that does not fit
is taken as unknown, never passed on as it came.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PENDING = "PENDING"
RUNNING = "RUNNING"
COMPLETED = "COMPLETED"
UNKNOWN = "UNKNOWN"
# States after which the job runs no more (man squeue, JOB STATE CODES).
ENDED = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "SPECIAL_EXIT", "TIMEOUT", "REVOKED",
})  # fmt: skip

_FORMS = {
    "JobId": r"\d{1,20}",
    "JobState": r"[A-Z_]{1,32}",
    "Reason": r"[A-Za-z0-9_.,:()/-]{1,200}",
    "StartTime": r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|Unknown|None",
    "NodeList": r"[A-Za-z0-9_.,\[\]-]{1,1000}|\(null\)",
    "Restarts": r"\d{1,6}",
    "ExitCode": r"\d{1,3}:\d{1,3}",
    "StdOut": r"/[^\s\x00-\x1f\x7f]{0,4095}",
}
_FIELDS = {name: re.compile(rf"(?:^|\s){name}=({form})(?=\s|$)") for name, form in _FORMS.items()}


@dataclass(frozen=True)
class JobInfo:
    """The job as Slurm has it: state, why it waits, its expected start, its nodes, its
    restarts and exit code, the path of its log (None: not said)."""

    state: str
    reason: str = ""
    start: str = ""
    nodes: str = ""
    restarts: int = 0
    exit_code: str = ""
    log: str | None = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED


def parse_job(text: str, job_id: str) -> JobInfo | None:
    """The job ``job_id`` in ``scontrol show job -o`` output; None when it is not there."""
    for line in text.splitlines()[:64]:
        fields = {
            name: match.group(1) for name, rule in _FIELDS.items() if (match := rule.search(line))
        }
        if fields.get("JobId") != job_id:
            continue
        nodes = fields.get("NodeList", "")
        start = fields.get("StartTime", "")
        return JobInfo(
            state=fields.get("JobState", UNKNOWN),
            reason=fields.get("Reason", "") if fields.get("Reason") != "None" else "",
            start="" if start in ("Unknown", "None") else start,
            nodes="" if nodes == "(null)" else nodes,
            restarts=int(fields.get("Restarts", "0")),
            exit_code=fields.get("ExitCode", ""),
            log=fields.get("StdOut"),
        )
    return None
