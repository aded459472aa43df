"""TOML files that people write (site profiles, job files): reading one with errors that name
the file, and the value types their keys may hold, recognised the same way for both.

Importing this must stay cheap: ``ddpimg env``, which every rank runs at start-up, loads a
site profile through it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from ddpimg.errors import DdpimgError
from ddpimg.untrusted import BadInput, read_bytes

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

# A profile or job file is a few KiB; the bound keeps a mistaken path (a log, /dev/zero:
# refused as a device) from being read whole.
TOML_LIMIT = 1 << 20
# A string, not a compiled expression: only a malformed file needs it.
_TOML_POSITION = r"line (\d+), column (\d+)"


class TomlFile(NamedTuple):
    """A parsed file and the bytes it was parsed from (a profile's content hash needs them)."""

    data: bytes
    document: dict[str, Any]


def read_toml(path: Path, error: type[DdpimgError], *, what: str, path_hint: str) -> TomlFile:
    """Read and parse ``path``. A file that cannot be read, is not UTF-8 or is not valid TOML
    raises ``error`` naming it; ``what`` says what the file is for (``site profile``) and
    ``path_hint`` where its path came from."""
    try:
        data = read_bytes(path, TOML_LIMIT)
    except OSError as err:
        raise error(f"cannot read {what} {path}: {err.strerror or err}", hint=path_hint) from err
    except BadInput as err:
        raise error(f"cannot read {what} {path}: it is {err}", hint=path_hint) from err
    try:
        return TomlFile(data, tomllib.loads(data.decode("utf-8")))
    except UnicodeDecodeError as err:
        raise error(f"{path}: not UTF-8 text ({err})", hint="save it as UTF-8") from err
    except RecursionError as err:
        raise error(
            f"{path}: arrays or tables nested too deeply to read",
            hint="a profile or job file nests a few levels; write it flat",
        ) from err
    except tomllib.TOMLDecodeError as err:
        position = re.search(_TOML_POSITION, str(err))
        where = f"line {position[1]}, column {position[2]}" if position else "the reported place"
        raise error(
            f"{path}: not valid TOML: {err}", hint=f"fix the TOML syntax at {where}"
        ) from err


_TOML_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string, on one line: quotes, backslashes and control
    characters escaped (what ``json.dumps`` would leave raw, DEL, TOML refuses)."""
    out = []
    for char in text:
        if char in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[char])
        elif char < " " or char == "\x7f":
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def is_int(value: object) -> bool:
    """An integer, and not a boolean: TOML's ``true`` is a Python bool, which is an int, and
    a file saying ``true`` did not mean a number."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _identity(value: Any) -> Any:
    return value


# A NamedTuple rather than a frozen dataclass: kinds are constants, and creating a dataclass
# costs every rank's start-up (ddpimg env) more than a NamedTuple does.
class Kind(NamedTuple):
    """A value type: its name in messages, how it is recognised, how it is stored, and how
    one is written in TOML (for hints).

    ``entry`` is set for tables of free-form names; each entry is checked against it so an
    error names the entry (``env.NCCL_IB_TIMEOUT``), not just the table.
    """

    name: str
    accepts: Callable[[object], bool]
    convert: Callable[[Any], Any] = _identity
    entry: Kind | None = None
    example: str = ""


STRING = Kind("a string", lambda value: isinstance(value, str), example='"text"')
INTEGER = Kind("an integer", is_int, example="4")
STRING_LIST = Kind("a list of strings", is_str_list, tuple, example='["a", "b"]')
NUMBER = Kind("a number", lambda value: is_int(value) or isinstance(value, float), float)
