"""Slurm hostlist expansion in pure Python (no ``scontrol show hostnames``).

Syntax accepted, as Slurm writes it into SLURM_JOB_NODELIST and friends:

* plain names, separated by commas (or whitespace): ``node1,node2``
* a bracket of numbers and ranges after a prefix: ``n[1-3,7]``; the width of a range's lower
  bound is kept, so ``n[001-003]`` gives ``n001 n002 n003`` and ``n[8-10]`` gives ``n8 n9 n10``
* text after a bracket: ``c[1-2]-ib``; dashes anywhere in names: ``gpu-a100-[1-2]``
* several brackets in one name: ``rack[1-2]n[1-2]`` gives the cartesian product with the first
  bracket varying slowest (rack1n1 rack1n2 rack2n1 rack2n2), as Slurm orders it
* several groups at top level: ``r1n[001-003,010],r2n005``

The order of the input is kept and duplicates are not removed. Expansion is linear in the
size of the output: the input is split with one regular expression and each range becomes a
list comprehension.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable

from ddpimg.errors import HostlistError

# Bigger than any machine, small enough that a typo such as n[1-1000000000] fails fast
# instead of exhausting memory.
MAX_HOSTS = 1 << 20

_TOKENS = re.compile(r"(\[|\]|[,\s]+)")
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?", re.ASCII)
_ErrorFactory = Callable[[str], HostlistError]
_HINT = (
    "a Slurm hostlist looks like node[001-004,010],gpu-a100-7; "
    "check where the variable was set (srun sets it; a hand-written value may be wrong)"
)


def expand_hostlist(value: str, variable: str = "SLURM_JOB_NODELIST") -> list[str]:
    """Expand a Slurm hostlist into host names, in Slurm's order.

    ``variable`` only names the source of ``value`` in error messages. Raises HostlistError
    for an empty list or name, an unbalanced, nested or empty bracket, a reversed range, a
    part that is not a number or range, or more than MAX_HOSTS names.
    """

    def error(problem: str) -> HostlistError:
        return HostlistError(f"{variable}={value!r}: {problem}", _HINT)

    if not value.strip():
        raise error("the host list is empty")
    hosts: list[str] = []
    # One pattern alternates literal text (even indices) and bracket contents (odd indices).
    pattern: list[str] = [""]
    in_bracket = False
    for token in _TOKENS.split(value.strip()):
        if token == "[":
            if in_bracket:
                raise error("'[' inside a bracket: brackets cannot nest")
            in_bracket = True
            pattern.append("")
        elif token == "]":
            if not in_bracket:
                raise error("']' without a matching '['")
            in_bracket = False
            pattern.append("")
        elif in_bracket or not _is_separator(token):
            pattern[-1] += token
        else:
            if token.count(",") > 1:
                raise error("an empty host name between two commas")
            hosts.extend(_expand_pattern(pattern, len(hosts), error))
            pattern = [""]
    if in_bracket:
        raise error("'[' is never closed by ']'")
    hosts.extend(_expand_pattern(pattern, len(hosts), error))
    return hosts


def _is_separator(token: str) -> bool:
    return token != "" and (token[0] == "," or token[0].isspace())


def _expand_pattern(pattern: list[str], before: int, error: _ErrorFactory) -> list[str]:
    """The names of one top-level pattern; ``before`` names were expanded already."""
    if len(pattern) == 1:
        if not pattern[0]:
            raise error("an empty host name (a comma at the start or the end)")
        return [pattern[0]]
    choices = [
        _expand_bracket(part, before, error) if index % 2 else [part]
        for index, part in enumerate(pattern)
        if index % 2 or part
    ]
    _check_count(before + math.prod(len(options) for options in choices), error)
    if len(choices) == 1:
        return choices[0]
    return ["".join(parts) for parts in itertools.product(*choices)]


def _expand_bracket(content: str, before: int, error: _ErrorFactory) -> list[str]:
    """The numbers of one bracket's comma-separated numbers and ranges, zero-padded."""
    if not content:
        raise error("'[]' is empty: a bracket needs numbers or ranges such as [1-4,7]")
    numbers: list[str] = []
    for item in content.split(","):
        match = _RANGE.fullmatch(item)
        if match is None:
            raise error(f"{item!r} in [{content}] is not a number or a range such as 3 or 001-004")
        low_text, high_text = match.group(1), match.group(2)
        if high_text is None:
            numbers.append(low_text)
            continue
        low, high = int(low_text), int(high_text)
        if high < low:
            raise error(f"range {item} in [{content}] is reversed; write {high_text}-{low_text}")
        _check_count(before + len(numbers) + high - low + 1, error)
        # Slurm pads every number to the width of the range's lower bound as written.
        width = len(low_text)
        numbers += [f"{number:0{width}d}" for number in range(low, high + 1)]
    return numbers


def _check_count(count: int, error: _ErrorFactory) -> None:
    if count > MAX_HOSTS:
        raise error(f"expands to more than {MAX_HOSTS} hosts; is a range mistyped?")
