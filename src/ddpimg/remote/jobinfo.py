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
    "ArrayJobId": r"\d{1,20}",
    "ArrayTaskId": r"[0-9][0-9,%-]{0,999}",
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


def _fields(line: str) -> dict[str, str]:
    return {name: match.group(1) for name, rule in _FIELDS.items() if (match := rule.search(line))}


def _info(fields: dict[str, str]) -> JobInfo:
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


def parse_job(text: str, job_id: str) -> JobInfo | None:
    """The job ``job_id`` in ``scontrol show job -o`` output; None when it is not there."""
    for line in text.splitlines()[:64]:
        fields = _fields(line)
        if fields.get("JobId") == job_id:
            return _info(fields)
    return None


# An array's tasks: one line each once started, the pending ones in one record of their
# own (``ArrayTaskId=2-5%2``).
MAX_ARRAY_LINES = 20_000
MAX_TASK_INDEX = 1_000_000


def task_ids(text: str) -> list[int]:
    """The indices an ``ArrayTaskId`` names (``3``, ``1,3``, ``2-5%2``); none for a form
    that is not one, or that names more than MAX_ARRAY_LINES."""
    ids: list[int] = []
    for part in text.split("%", 1)[0].split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            return []
        first, last = int(low), int(high) if dash else int(low)
        if last < first or last > MAX_TASK_INDEX or len(ids) + last - first >= MAX_ARRAY_LINES:
            return []
        ids.extend(range(first, last + 1))
    return ids


def parse_array(text: str, array_id: str) -> dict[int, JobInfo]:
    """The tasks of array job ``array_id`` in ``scontrol show job -o`` output, by index."""
    tasks: dict[int, JobInfo] = {}
    for line in text.splitlines()[:MAX_ARRAY_LINES]:
        fields = _fields(line)
        if fields.get("ArrayJobId") != array_id or "ArrayTaskId" not in fields:
            continue
        info = _info(fields)
        for index in task_ids(fields["ArrayTaskId"]):
            tasks[index] = info
    return tasks
