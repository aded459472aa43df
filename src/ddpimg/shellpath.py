"""Paths that a batch script expands on the node, such as ``$LOCAL_SCRATCH`` or
``${TMPDIR:-/tmp}``: which of them are safe to write between double quotes.

A rendered script quotes every value it is given (``shlex.quote``), except a path that must
be expanded on the compute node (``--local-dir``, a profile's ``job.local_dir``). Such a path
sits in double quotes, where bash still runs ``$(...)`` and backticks, so it may hold only
literal characters and the plain variable forms ``$NAME``, ``${NAME}`` and
``${NAME:-DEFAULT}`` (``${NAME-DEFAULT}``) with a literal default; anything else is refused
by :func:`expandable_path_problem` before a script is written.
"""

from __future__ import annotations

import re

# Inside double quotes bash gives a meaning to $, `, " and \ only; whitespace and control
# characters are refused as well (they break the line or the word on the node).
_LITERAL = r"[^$`\"\\\s\x00-\x1f\x7f]"
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_DEFAULT = r"[^$`\"\\\s\x00-\x1f\x7f{}]*"
_VARIABLE = rf"\${_NAME}|\$\{{{_NAME}(?::?-{_DEFAULT})?\}}"
# Absolute, or starting with a variable that holds one: never an option to mkdir or cp.
_EXPANDABLE_PATH = re.compile(rf"(?:/|{_VARIABLE})(?:{_LITERAL}|{_VARIABLE})*")
ALLOWED_FORMS = "$NAME, ${NAME} and ${NAME:-DEFAULT}"


def expandable_path_problem(text: str) -> str | None:
    """Why ``text`` cannot be written between double quotes in a script, or None."""
    if _EXPANDABLE_PATH.fullmatch(text):
        return None
    return (
        f"{text!r} is not a path the script can expand safely: it must start with / or a "
        f"variable, and hold only literal characters and {ALLOWED_FORMS} (no $(...), "
        "backticks, quotes, backslashes or whitespace)"
    )
