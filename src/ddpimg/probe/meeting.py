"""How the probing tasks meet without any network they can trust yet: files in a directory
every node sees (the one the draft is written to, as the run directories of training are).
Each task posts one JSON file per stage; :meth:`Meeting.gather` waits, bounded, until every
task has posted."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpimg.errors import DdpimgError
from ddpimg.fsio import write_json_atomic

POLL_S = 0.2


@dataclass(frozen=True)
class Meeting:
    directory: Path
    task: int
    tasks: int
    timeout_s: float

    def post(self, stage: str, data: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.directory / f"{stage}-{self.task}.json", data)

    def gather(self, stage: str) -> list[dict[str, Any]]:
        """Every task's post of ``stage``, in task order."""
        paths = [self.directory / f"{stage}-{task}.json" for task in range(self.tasks)]
        deadline = time.monotonic() + self.timeout_s
        while True:
            missing = [task for task, path in enumerate(paths) if not path.exists()]
            if not missing:
                return [json.loads(path.read_text()) for path in paths]
            if time.monotonic() > deadline:
                raise DdpimgError(
                    f"probe: tasks {', '.join(map(str, missing))} posted no {stage} to "
                    f"{self.directory} within {self.timeout_s:g} s",
                    hint="the directory of --out must be on a file system every node sees; "
                    "check those tasks' output",
                )
            time.sleep(POLL_S)
