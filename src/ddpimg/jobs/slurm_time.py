"""Slurm time limits (``--time``, ``time = ...``): the forms sbatch accepts, in seconds."""

from __future__ import annotations

import re

from ddpimg.errors import JobError

_SLURM_TIME = re.compile(
    r"(?:(?P<days>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
    r"|(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)"
    r"|(?P<mm>\d+):(?P<ss>\d+)"
    r"|(?P<minutes>\d+))\Z"
)
_UNLIMITED = ("UNLIMITED", "INFINITE")


def parse_slurm_time(value: str, origin: str = "--time") -> int | None:
    """Seconds in a Slurm time limit (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS``); None for ``UNLIMITED`` / ``INFINITE``. ``origin`` names where the value
    was given, for the error."""
    text = value.strip()
    if text.upper() in _UNLIMITED:
        return None
    match = _SLURM_TIME.fullmatch(text)
    if match is None:
        raise JobError(
            f"{origin}: '{value}' is not a Slurm time limit",
            hint="write minutes (90), HH:MM:SS (01:30:00) or D-HH:MM:SS (1-12:00:00)",
        )
    parts = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    if "minutes" in parts:
        return parts["minutes"] * 60
    if "mm" in parts:
        return parts["mm"] * 60 + parts["ss"]
    if "h" in parts:
        return parts["h"] * 3600 + parts["m"] * 60 + parts["s"]
    return parts["days"] * 86400 + parts["dh"] * 3600 + parts.get("dm", 0) * 60 + parts.get("ds", 0)
