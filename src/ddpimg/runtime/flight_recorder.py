"""Evidence when a collective hangs: PyTorch's NCCL flight recorder, on by default on GPU runs.

ProcessGroupNCCL keeps the last N collectives of every rank in a ring buffer (the "flight
recorder") when its buffer size is above 0. With dump-on-timeout, the watchdog that ends a
collective stuck longer than the process group's timeout (``--timeout``, passed to
``init_process_group``) first writes each rank's buffer to ``<prefix><rank>``; comparing the
ranks' files shows which rank never entered which collective. torch's analyser reads them:
``torchfrtrace DIR`` (also ``python -m torch.distributed.flight_recorder.fr_trace DIR``).

The variable names, read from the torch wheels the images ship (2.10 and 2.14):
``TORCH_FR_BUFFER_SIZE`` and ``TORCH_FR_DUMP_TEMP_FILE`` are the current names,
``TORCH_NCCL_TRACE_BUFFER_SIZE`` and ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` the older ones that
torch still reads; both spellings are set so either torch finds them.
``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` turns the dump on; ``TORCH_NCCL_ASYNC_ERROR_HANDLING=3``
(torch's documented default, written out so that the bound holds whatever the image's torch
defaults to) makes the watchdog end the process after the timeout instead of letting it hang;
a value already set is kept (torchrun sets 1: abort the communicators, then end). Measured on
an H200 (docs/performance-history.md, "GPU results"): a watchdog that does not end the process (a
hang behind a kernel no NCCL abort stops) leaves the end to its monitor,
TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC (480 s) after the dump.

Precedence (docs/launchers.md, "Precedence"): ``DDPIMG_FLIGHT_RECORDER`` (entries, ``0`` turns
it off) > a variable exported by the user or the site profile (applied to the environment before
this runs) > the defaults here. Pure except :func:`enable_flight_recorder`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

SWITCH = "DDPIMG_FLIGHT_RECORDER"
DEFAULT_ENTRIES = 2000
BUFFER_NAMES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
FILE_NAMES = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
DUMP_ON_TIMEOUT = "TORCH_NCCL_DUMP_ON_TIMEOUT"
ASYNC_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
TEAR_DOWN = "3"
TRACE_DIR = "nccl-trace"
FILE_PREFIX = "rank_"


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((env[name] for name in names if env.get(name)), None)


def flight_recorder_env(
    env: Mapping[str, str], backend: str, trace_dir: str | None
) -> dict[str, str]:
    """The variables to set for this rank (only those that change ``env``). Nothing for a
    backend other than NCCL: Gloo has no flight recorder dump on timeout."""
    if backend != "nccl":
        return {}
    switch = env.get(SWITCH, "").strip()
    if switch:
        if not switch.isdigit():
            from ddpimg.errors import DdpimgError

            raise DdpimgError(
                f"{SWITCH}={switch!r} is not a number of entries",
                hint=f"{SWITCH}={DEFAULT_ENTRIES} (the default), or 0 to turn the recorder off",
            )
        entries = switch
    else:
        entries = _first(env, BUFFER_NAMES) or str(DEFAULT_ENTRIES)
    wanted = dict.fromkeys(BUFFER_NAMES, entries)
    if entries != "0":
        wanted[DUMP_ON_TIMEOUT] = env.get(DUMP_ON_TIMEOUT) or "1"
        prefix = _first(env, FILE_NAMES)
        if prefix is None and trace_dir:
            prefix = str(Path(trace_dir) / FILE_PREFIX)
        if prefix is not None:
            wanted.update(dict.fromkeys(FILE_NAMES, prefix))
    wanted[ASYNC_ERROR_HANDLING] = env.get(ASYNC_ERROR_HANDLING) or TEAR_DOWN
    return {name: value for name, value in wanted.items() if env.get(name) != value}


def enable_flight_recorder(
    backend: str, trace_dir: str | None, env: MutableMapping[str, str] = os.environ
) -> dict[str, str]:
    """Set the variables in ``env`` (before ``init_process_group``) and make the dump's
    directory; returns what was set."""
    changes = flight_recorder_env(env, backend, trace_dir)
    env.update(changes)
    prefix = env.get(FILE_NAMES[0])
    if prefix and env.get(BUFFER_NAMES[0], "0") != "0":
        Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    return changes


def dump_directory(env: Mapping[str, str], backend: str) -> str | None:
    """Where NCCL's flight recorder dumps go (the directory of ``<prefix><rank>``), or None
    when it is off or the backend is not NCCL: for the message of a stalled run."""
    prefix = _first(env, FILE_NAMES)
    if backend != "nccl" or not prefix or _first(env, BUFFER_NAMES) in (None, "0"):
        return None
    return str(Path(prefix).parent)


def dump_now(rank: int, env: Mapping[str, str]) -> Path | None:
    """Write this rank's flight recorder now, where NCCL's own dump on timeout would go
    (``<prefix><rank>``): ddpimg's stall watch gives up on a collective before NCCL's
    watchdog does, and that watchdog ends the process without Python running again. None
    when there is no recorder to dump (off, not NCCL, or a torch without the call)."""
    import torch

    prefix = _first(env, FILE_NAMES)
    # A private binding (torch 2.10 and 2.14 both have it): the recorder's pickled content,
    # the same bytes NCCL's watchdog writes.
    dump = getattr(torch._C._distributed_c10d, "_dump_nccl_trace", None)
    if prefix is None or dump is None:
        return None
    try:
        content = dump(True, True, False)
    except RuntimeError:
        return None
    path = Path(f"{prefix}{rank}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path
