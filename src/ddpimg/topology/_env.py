"""Reading launcher variables from an environment mapping, with one error wording for all sources.

Every rank source reads integers, strings and the user's explicit MASTER_ADDR / MASTER_PORT
through these helpers, so a missing, an empty and a malformed variable always give three
different messages that name the variable and the value found.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ddpimg.errors import LauncherError, printable
from ddpimg.topology.model import Env

_WHOLE_NUMBER = re.compile(r"[0-9]+", re.ASCII)
# A rank, size or port has at most 10 digits; int() of a 5,000-digit one is refused unread.
_MAX_DIGITS = 18

# Apptainer's --cleanenv, `env -i` and wrapper scripts are the usual reasons a variable the
# launcher always sets does not reach the process.
_FILTERED_HINT = (
    "{launcher} sets it for every process it starts; check that nothing between the launcher "
    "and this process drops variables (apptainer --cleanenv, env -i, a wrapper script)"
)


class Master(NamedTuple):
    """MASTER_ADDR / MASTER_PORT as the user or the launcher exported them (None when unset)."""

    addr: str | None
    port: int | None


def read_str(env: Env, name: str, launcher: str) -> str:
    """The value of a variable the launcher always sets; missing and empty are errors."""
    if name not in env:
        raise LauncherError(
            f"{launcher}: {name} is not set", _FILTERED_HINT.format(launcher=launcher)
        )
    value = env[name].strip()
    if not value:
        raise LauncherError(
            f"{launcher}: {name} is set but empty",
            f"{launcher} gives it a value; check the script that sets or overrides {name}",
        )
    return value


def parse_int(name: str, value: str, launcher: str) -> int:
    """``value`` of variable ``name`` as a non-negative integer, or an error naming both."""
    text = value.strip()
    if not text:
        raise LauncherError(
            f"{launcher}: {name} is set but empty",
            f"expected a whole number such as 0 or 4; check the script that sets {name}",
        )
    if text.startswith("-") and _WHOLE_NUMBER.fullmatch(text[1:]):
        raise LauncherError(
            f"{launcher}: {name}={value} is negative",
            "ranks and sizes are whole numbers from 0 upwards",
        )
    if not _WHOLE_NUMBER.fullmatch(text) or len(text) > _MAX_DIGITS:
        raise LauncherError(
            f"{launcher}: {name}={printable(value[:40])} is not a whole number"
            + (f" of at most {_MAX_DIGITS} digits" if _WHOLE_NUMBER.fullmatch(text) else ""),
            f"expected a whole number such as 0 or 4; check the script that sets {name}",
        )
    return int(text)


def read_int(env: Env, name: str, launcher: str) -> int:
    """A non-negative integer variable the launcher always sets."""
    if name not in env:
        raise LauncherError(
            f"{launcher}: {name} is not set", _FILTERED_HINT.format(launcher=launcher)
        )
    return parse_int(name, env[name], launcher)


def read_optional_int(env: Env, name: str, launcher: str) -> int | None:
    """A non-negative integer variable, or None when it is not set (empty is still an error)."""
    if name not in env:
        return None
    return parse_int(name, env[name], launcher)


def read_master(env: Env, launcher: str, *, required: bool = False) -> Master:
    """MASTER_ADDR / MASTER_PORT when exported (they win over anything derived).

    With ``required`` (torchrun always sets both) a missing one is an error.
    """
    if required:
        read_str(env, "MASTER_ADDR", launcher)
        read_int(env, "MASTER_PORT", launcher)
    addr: str | None = None
    if "MASTER_ADDR" in env:
        addr = env["MASTER_ADDR"].strip()
        if not addr:
            raise LauncherError(
                f"{launcher}: MASTER_ADDR is set but empty",
                "unset MASTER_ADDR to let the site profile choose the rendezvous host, "
                "or export the host name of rank 0",
            )
    port = read_optional_int(env, "MASTER_PORT", launcher)
    if port is not None and not 1 <= port <= 65535:
        raise LauncherError(
            f"{launcher}: MASTER_PORT={env['MASTER_PORT']} is not a TCP port",
            "use a port between 1024 and 65535, or unset MASTER_PORT to derive one from the job",
        )
    return Master(addr, port)


def batch_job_id(env: Env) -> str:
    """The batch system's job id (Slurm, else PBS), or "" outside a batch job."""
    for name in ("SLURM_JOB_ID", "PBS_JOBID"):
        value = env.get(name, "").strip()
        if value:
            return value
    return ""
