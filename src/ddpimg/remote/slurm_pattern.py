"""Slurm's filename patterns (sbatch(1), "filename pattern"), as ``--output`` gives the
job's log: ``%%`` is a percent sign; ``%j``/``%A`` the job's id and ``%x`` its name (put in
at submit, ``submit.log_for``), ``%u`` the user, and the others (``%N`` the first node's
short name, task, step and array numbers) whatever Slurm made of them, known only on the
cluster. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"%%|%([0-9]{0,2})([A-Za-z])")


@dataclass(frozen=True)
class Field:
    """A ``%X`` of the pattern (``letter``: X) not put in yet; ``%5j``: a number padded
    with zeros to ``width`` digits."""

    letter: str
    width: int = 0

    def text(self) -> str:
        return f"%{self.width or ''}{self.letter}"

    def filled(self, value: str) -> str:
        return value.zfill(self.width) if value.isdigit() else value


def pattern_parts(pattern: str) -> list[str | Field]:
    """``pattern`` as literal text and fields: ``"a-%N-100%%.out"`` ->
    ``["a-", Field("N"), "-100%.out"]``."""
    parts: list[str | Field] = []
    literal = ""
    at = 0
    for match in _TOKEN.finditer(pattern):
        literal += pattern[at : match.start()]
        at = match.end()
        if match.group(0) == "%%":
            literal += "%"
            continue
        if literal:
            parts.append(literal)
            literal = ""
        parts.append(Field(match.group(2), int(match.group(1) or 0)))
    literal += pattern[at:]
    if literal:
        parts.append(literal)
    return parts


def fill(pattern: str, values: dict[str, str]) -> str:
    """``pattern`` with the fields of ``values`` (letter -> text) put in; the others stay
    (``%N``), and a literal percent sign is written ``%%`` again."""
    out = []
    for part in pattern_parts(pattern):
        if isinstance(part, Field):
            value = values.get(part.letter)
            out.append(part.text() if value is None else part.filled(value))
        else:
            out.append(part.replace("%", "%%"))
    return "".join(out)


def name_rule(pattern: str) -> re.Pattern[str]:
    """The names a file of ``pattern`` (one path part) may have: a field stands for any
    text without a slash."""
    return re.compile(
        "".join(
            "[^/]*" if isinstance(part, Field) else re.escape(part)
            for part in pattern_parts(pattern)
        )
    )
