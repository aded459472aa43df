"""Shell templates of the rendered job scripts (``templates/*.sh``), filled in line by line.

A template is a bash file that shellcheck reads as it is (``tests/jobs/test_golden.py``):
the fixed parts of a job script stay readable as shell instead of Python strings. Two kinds
of placeholder, both ``@NAME@``: a whole line that is only a placeholder becomes a list of
lines (none at all when the list is empty, so no blank line is left behind), and a
placeholder inside a line becomes one value. Values are inserted as given: the caller quotes
what a user can set (:mod:`ddpimg.jobs.render`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from importlib import resources

PLACEHOLDER = re.compile(r"@([A-Z_]+)@")


def read_template(name: str) -> str:
    """The text of ``templates/NAME`` as installed beside this module."""
    return (resources.files("ddpimg.jobs") / "templates" / name).read_text(encoding="utf-8")


def fill_template(
    template: str, values: Mapping[str, str], parts: Mapping[str, Sequence[str]]
) -> list[str]:
    """``template``'s lines with each ``@NAME@`` line replaced by ``parts[NAME]`` and each
    ``@NAME@`` inside a line by ``values[NAME]``; a placeholder with neither is an error
    (a template and its renderer out of step), as is a name given but not used."""
    lines: list[str] = []
    used: set[str] = set()

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise KeyError(f"template placeholder @{name}@ has no value")
        used.add(name)
        return values[name]

    for line in template.splitlines():
        whole = PLACEHOLDER.fullmatch(line)
        if whole and whole.group(1) in parts:
            used.add(whole.group(1))
            lines.extend(parts[whole.group(1)])
        else:
            lines.append(PLACEHOLDER.sub(value, line))
    unused = (set(values) | set(parts)) - used
    if unused:
        raise KeyError(f"template has no placeholder for {', '.join(sorted(unused))}")
    return lines


JOB_BODY = read_template("job-body.sh")
