"""ddpimg's records in the rendezvous store, authenticated with a per-job key.

torch's TCPStore has no authentication: any process that reaches its port can read and
write any key. ddpimg keeps records there that decide how a run ends (every rank's progress
``ddpimg/progress/N`` and the stall verdict ``ddpimg/stall/verdict``), so each value is
sealed with an HMAC-SHA256 under a key only the job's ranks hold, bound to the store key it
is written under (a record cannot be replayed as another rank's). A value that does not
open with the key (forged, or damaged) is read as absent: it cannot name a rank as lost
nor end a run; at worst a forger hides a record until its rank publishes again (every
heartbeat), or delays a judgement by the bounded waits of ``runtime.stall``.

Where the key comes from (``shared_key``), first that applies:

1. ``DDPIMG_STORE_KEY`` in the environment (64 hex digits): srun and torchrun hand their
   environment to every task (Open MPI: ``mpirun -x DDPIMG_STORE_KEY``); ``train
   --nproc-per-node`` on one node exports a fresh one to its workers. A process's
   environment is readable by its own user (and root) only: ``/proc/PID/environ`` is 0400.
2. Otherwise rank 0 draws one (``secrets``) once the process group exists and broadcasts it
   over the process group: a point-to-point connection between the job's own ranks, which
   another unprivileged user can neither join after it is set up nor read. A user's script
   makes its own process group, later: its boot broadcasts over a Gloo group of its own
   (``broadcast_key``).

The store's listening socket is also bound to the master address only
(``runtime.rendezvous.listen_socket``), so where the site's rule names an internal fabric
address, no other network reaches the port at all.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ddpimg.errors import LauncherError

if TYPE_CHECKING:
    import torch
    from torch._C._distributed_c10d import Store

KEY_VARIABLE = "DDPIMG_STORE_KEY"
KEY_BYTES = 32
_MAC_HEX = 2 * hashlib.sha256().digest_size
_SEPARATOR = b":"


def new_key_hex() -> str:
    """A fresh key, as ``DDPIMG_STORE_KEY`` holds it."""
    return secrets.token_hex(KEY_BYTES)


def key_from_env(env: Mapping[str, str]) -> bytes | None:
    """``DDPIMG_STORE_KEY``'s key; None when unset. LauncherError when it is set to anything
    but 64 hex digits (a short key would be guessable)."""
    text = env.get(KEY_VARIABLE, "").strip()
    if not text:
        return None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise LauncherError(
            f"{KEY_VARIABLE} must be {2 * KEY_BYTES} hex digits, found {len(text)} characters",
            hint=f'export {KEY_VARIABLE}="$(python3 -c "import secrets; '
            f'print(secrets.token_hex({KEY_BYTES}))")" once per job, or unset it (ddpimg then '
            "shares a key of its own between the ranks)",
        )
    return key


def shared_key(device: torch.device, env: Mapping[str, str] = os.environ) -> bytes:
    """The job's key on every rank: ``DDPIMG_STORE_KEY``, else rank 0's fresh key broadcast
    over the default process group (collective: every rank calls it at the same point,
    with its process group's device). RuntimeError when there is neither."""
    import torch
    import torch.distributed as dist

    key = key_from_env(env)
    if key is not None:
        return key
    if not dist.is_initialized():
        raise RuntimeError(
            f"no {KEY_VARIABLE} and no process group to share a store key over: export "
            f"{KEY_VARIABLE} for the job, or open the store's records after init_process_group"
        )
    drawn = secrets.token_bytes(KEY_BYTES) if dist.get_rank() == 0 else bytes(KEY_BYTES)
    tensor = torch.tensor(list(drawn), dtype=torch.uint8, device=device)
    dist.broadcast(tensor, src=0)
    return bytes(tensor.cpu().tolist())


def broadcast_key(store: Store, rank: int, world_size: int, timeout_s: float) -> bytes:
    """Rank 0's fresh key on every rank, over a Gloo group of the job's ranks opened for this
    alone (under ``train --script`` no process group exists yet: the script makes its own
    later, and a default group of ddpimg's would be in its way). Collective."""
    from datetime import timedelta

    import torch
    from torch.distributed import (  # type: ignore[attr-defined]  # public re-exports
        PrefixStore,
        ProcessGroupGloo,
    )

    group = ProcessGroupGloo(
        PrefixStore("ddpimg/key", store), rank, world_size, timedelta(seconds=timeout_s)
    )
    drawn = secrets.token_bytes(KEY_BYTES) if rank == 0 else bytes(KEY_BYTES)
    tensor = torch.tensor(list(drawn), dtype=torch.uint8)
    group.broadcast([tensor]).wait()  # type: ignore[attr-defined]  # a Backend, as torch uses it
    return bytes(tensor.tolist())


class RecordSeal:
    """Seals and opens store values with the job's key."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a store key has {KEY_BYTES} bytes, not {len(key)}")
        self._key = key

    def _mac(self, store_key: str, body: bytes) -> bytes:
        message = store_key.encode() + b"\n" + body
        return hmac.new(self._key, message, hashlib.sha256).hexdigest().encode()

    def seal(self, store_key: str, text: str) -> str:
        """The value to write under ``store_key``: MAC (hex), separator, ``text``."""
        return (self._mac(store_key, text.encode()) + _SEPARATOR).decode() + text

    def open(self, store_key: str, value: bytes) -> str | None:
        """The text sealed in ``value`` under ``store_key``; None when it was not sealed
        with this key for this store key."""
        mac, separator, body = bytes(value).partition(_SEPARATOR)
        if not separator or len(mac) != _MAC_HEX:
            return None
        if not hmac.compare_digest(mac, self._mac(store_key, body)):
            return None
        try:
            return body.decode()
        except UnicodeDecodeError:
            return None
