"""What a check of a job reports: an error (nothing is rendered) or a warning."""

from __future__ import annotations

from dataclasses import dataclass

from ddpimg.errors import printable, with_hint

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One problem: ``level`` is ``error`` (nothing is rendered) or ``warning``."""

    level: str
    message: str
    hint: str

    def __str__(self) -> str:
        return with_hint(printable(self.message), printable(self.hint))
