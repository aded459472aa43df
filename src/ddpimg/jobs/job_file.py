"""The TOML job file (``ddpimg sbatch --config job.toml``): top-level keys named like the flags
(``gpus_per_node = 4``), plus ``site`` and ``command = ["train", ...]``.

Loading checks key names and types, naming the file and key; ranges and choices are checked
with the other layers when the job is resolved (:mod:`ddpimg.jobs.resolve`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpimg.errors import JobError
from ddpimg.jobs.fields import FIELDS
from ddpimg.tomlfile import STRING, Kind, read_toml

# The job file may also name the site; it picks the profile, so it is not a JobSpec field.
KEY_KINDS: Mapping[str, Kind] = {"site": STRING, **{f.name: f.toml_kind for f in FIELDS}}
JOB_FILE_KEYS = tuple(KEY_KINDS)


@dataclass(frozen=True)
class JobFile:
    """A TOML job file's values by key (checked for names and types, not yet for ranges)."""

    path: str
    values: Mapping[str, Any]

    @property
    def site(self) -> str | None:
        value = self.values.get("site")
        return str(value) if value is not None else None


def load_job_file(path: str | Path) -> JobFile:
    """Read a job file. Unknown keys and wrong types are errors."""
    path = Path(path)
    _, document = read_toml(
        path, JobError, what="job file", path_hint="check the path given to --config"
    )
    for key, value in document.items():
        if key not in KEY_KINDS:
            closest = difflib.get_close_matches(key, JOB_FILE_KEYS, n=1)
            suggestion = f"did you mean '{closest[0]}'? " if closest else ""
            where = " (job files have no sections)" if isinstance(value, dict) else ""
            raise JobError(
                f"{path}: unknown key '{key}'{where}",
                hint=f"{suggestion}known keys: {', '.join(sorted(JOB_FILE_KEYS))}",
            )
        kind = KEY_KINDS[key]
        if not kind.accepts(value):
            raise JobError(
                f"{path}: key '{key}' must be {kind.name}, found {value!r} "
                f"({type(value).__name__})",
                hint=f"e.g. {key} = {kind.example}",
            )
    return JobFile(str(path), document)
