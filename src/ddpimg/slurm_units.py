"""Slurm's time limits (``--time``) and memory sizes (``--mem``), in the forms sbatch accepts.

A leaf module: site profiles (partition limits) and jobs (``ddpimg sbatch``) both read these
values, and ``ddpimg env``, which every rank runs at start-up, must not import the jobs
package to load a profile.
"""

from __future__ import annotations

import re

from ddpimg.errors import DdpimgError, JobError

_SLURM_TIME = re.compile(
    r"(?:(?P<days>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
    r"|(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)"
    r"|(?P<mm>\d+):(?P<ss>\d+)"
    r"|(?P<minutes>\d+))\Z"
)
_UNLIMITED = ("UNLIMITED", "INFINITE")
# sbatch --mem: an integer and an optional unit; megabytes without one.
_SLURM_MEMORY = re.compile(r"(?P<number>\d+)(?P<unit>[KMGT]?)\Z", re.IGNORECASE)
_MIB_PER_UNIT = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_slurm_time(
    value: str, origin: str = "--time", error: type[DdpimgError] = JobError
) -> int | None:
    """Seconds in a Slurm time limit (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS``); None for ``UNLIMITED`` / ``INFINITE``. ``origin`` names where the value
    was given, for the error."""
    text = value.strip()
    if text.upper() in _UNLIMITED:
        return None
    match = _SLURM_TIME.fullmatch(text)
    if match is None:
        raise error(
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


def parse_slurm_memory(
    value: str, origin: str = "--mem", error: type[DdpimgError] = JobError
) -> float:
    """Mebibytes in a Slurm memory size (``320G``, ``4096``, ``1T``; MB without a unit).
    ``0`` is what ``--mem=0`` means to Slurm: all of the node's memory."""
    match = _SLURM_MEMORY.fullmatch(value.strip())
    if match is None:
        raise error(
            f"{origin}: '{value}' is not a Slurm memory size",
            hint="write an integer and a unit: 320G, 512M, 1T (megabytes without a unit)",
        )
    return int(match["number"]) * _MIB_PER_UNIT[(match["unit"] or "M").upper()]


def format_slurm_memory(mib: float) -> str:
    """``mib`` the way Slurm takes it: whole gigabytes as ``NG``, else megabytes ``NM``."""
    if mib >= 1024 and mib % 1024 == 0:
        return f"{int(mib // 1024)}G"
    return f"{round(mib)}M"
