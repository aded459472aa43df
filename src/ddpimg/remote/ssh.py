"""The user's own OpenSSH client as the transport: one master connection for a whole
command, every program of the command run over it.

``ssh`` is whatever the user runs (``ssh`` on PATH, or the words of ``$DDPIMG_SSH_COMMAND``,
as git's ``GIT_SSH_COMMAND``: ``ssh -F ~/other_config``), so ``~/.ssh/config``, the agent,
``ProxyJump`` and a host's own options apply as they do for ``ssh HOST``. ddpimg adds only
the multiplexing (``ControlMaster``, a socket in a private temporary directory; command-line
options win over the config's) and, unless a terminal is there to type on, ``BatchMode``: no
password or passphrase prompt anyone could answer, and none is ever stored.

Why ssh failed is read from its own message (status 255): an unknown host, a refused key or
a host key that does not match cannot be cured by trying again; a refused, reset or timed
out connection may be (``ConnectionLost.retryable``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from ddpimg.errors import DdpimgError, printable
from ddpimg.remote.programs import command_line
from ddpimg.remote.transport import Completed, ConnectionLost, ProcessTransport

SSH_COMMAND_VARIABLE = "DDPIMG_SSH_COMMAND"
SSH_FAILED = 255
CONNECT_TIMEOUT_S = 20
# Beyond ssh's own ConnectTimeout: the key exchange and the login itself.
READY_MARGIN_S = 40.0
# A dead connection is noticed within ServerAliveInterval x ServerAliveCountMax.
ALIVE_INTERVAL_S = 5
ALIVE_COUNT = 3
STOP_WAIT_S = 5.0
_POLL_S = 0.05

# Causes that trying again cannot cure, each known by the whole line ssh writes for it (a
# pre-login banner is on the same stream: one that mentions "permission denied" must not
# turn a dropped connection into a refusal). Matched on lines, lower-cased.
_FIXED = (
    ((r"^ssh: could not resolve hostname ", r": name or service not known$"), "unknown host",
     False, "check the name, or give it a Host entry with its HostName in ~/.ssh/config"),
    ((r"^\S*: permission denied \([a-z0-9@.,-]+\)\.?$", r"^permission denied, please try again",
      r"^received disconnect from .*: too many authentication failures"),
     "the login was refused", False,
     "`ssh HOST true` must log in without a prompt: load your key into the agent (ssh-add) "
     "or name it with IdentityFile in ~/.ssh/config"),
    ((r"^host key verification failed\.$", r"remote host identification has changed!"),
     "its host key is not the one known", False,
     "connect once with ssh HOST and check the key it shows; ddpimg never accepts a host "
     "key itself"),
    ((r": bad configuration option: ", r": unsupported option ", r"could not open config",
      r"terminating, \d+ bad configuration options", r"garbage at end of line"),
     "ssh's configuration", False,
     "fix the line ssh names in ~/.ssh/config (or the file $DDPIMG_SSH_COMMAND names)"),
)  # fmt: skip
_RETRYABLE = (
    "connection refused", "connection timed out", "operation timed out", "no route to host",
    "network is unreachable", "connection reset", "connection closed", "broken pipe",
    "kex_exchange_identification", "timeout, server", "not responding", "closed by remote",
    "control socket", "mux_client", "master is not running", "lost connection",
)  # fmt: skip


# The control socket: CONTROL_NAME in a private folder (mkdtemp: CONTROL_PREFIX and 8
# characters). A Unix socket's path and its NUL must fit sys/un.h's sun_path: 104 bytes on
# macOS and the BSDs, 108 on Linux; ssh's master first binds PATH.XXXXXXXXXXXXXXXX (16
# random characters, OpenSSH's mux.c, muxserver_listen) and then renames it to PATH.
CONTROL_PREFIX = "ddpimg-ssh-"
CONTROL_NAME = "control"
SUN_PATH_BYTES = {"linux": 108}
SUN_PATH_DEFAULT = 104
_MUX_TEMPORARY = len(".") + 16
_MKDTEMP_RANDOM = 8
FALLBACK_PARENT = "/tmp"


def control_parent(tmpdir: str, platform: str = sys.platform) -> str:
    """The folder the control socket's private folder goes into: ``tmpdir`` (the user's
    temporary directory), unless a socket under it would not fit ``platform``'s
    ``sun_path`` (macOS's ``$TMPDIR`` is ``/var/folders/xx/<30 characters>/T/``, and a
    TMPDIR of one's own may be longer): then /tmp, which every Unix has and keeps short."""
    limit = SUN_PATH_BYTES.get("linux" if platform.startswith("linux") else platform,
                               SUN_PATH_DEFAULT)  # fmt: skip
    tail = len(f"/{CONTROL_PREFIX}{'x' * _MKDTEMP_RANDOM}/{CONTROL_NAME}") + _MUX_TEMPORARY
    for parent in (tmpdir.rstrip("/") or "/", FALLBACK_PARENT):
        if len(os.fsencode(parent)) + tail < limit:
            return parent
    raise DdpimgError(
        f"the ssh control socket would not fit a Unix socket's {limit} bytes under "
        f"{printable(tmpdir)} nor {FALLBACK_PARENT}",
        hint="set TMPDIR to a short directory of your own (TMPDIR=/tmp ddpimg ...)",
    )


def ssh_words(env: Mapping[str, str]) -> list[str]:
    """The ssh client and its options: ``$DDPIMG_SSH_COMMAND`` split as a shell would, else
    ``ssh``."""
    text = env.get(SSH_COMMAND_VARIABLE, "").strip()
    try:
        words = shlex.split(text) if text else ["ssh"]
    except ValueError as err:
        raise DdpimgError(
            f"{SSH_COMMAND_VARIABLE}={text!r} cannot be split into words ({err})",
            hint="give the client and its options as a shell would read them: ssh -F FILE",
        ) from err
    if shutil.which(words[0], path=env.get("PATH")) is None:
        raise DdpimgError(
            f"{words[0]}: the ssh client is not installed or not on PATH",
            hint="install OpenSSH's client (apt install openssh-client), or name it with "
            f"{SSH_COMMAND_VARIABLE}",
        )
    return words


def check_host(host: str) -> str:
    """``host`` as ssh takes it (``[user@]name``, a ``Host`` of ~/.ssh/config); never an
    option or more than one word."""
    if not host or host.startswith("-") or not host.isprintable() or any(c.isspace() for c in host):
        raise DdpimgError(
            f"--host {printable(host)!r}: not a host name (empty, an option, or spaces in it)",
            hint="give the login node as you would to ssh: --host login.cluster.org, "
            "--host me@login, or a Host of ~/.ssh/config",
        )
    return host


def connection_error(host: str, stderr: str) -> ConnectionLost:
    """What ssh's message (status 255) says went wrong."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = printable(lines[-1][:300]) if lines else "no message"
    lowered = stderr.lower()
    said_lines = [line.lower() for line in lines]
    for forms, what, retryable, hint in _FIXED:
        if any(re.search(form, line) for form in forms for line in said_lines):
            return ConnectionLost(
                f"ssh {host}: {what} (ssh: {said})",
                hint=hint.replace("HOST", host),
                retryable=retryable,
            )
    retryable = any(needle in lowered for needle in _RETRYABLE)
    return ConnectionLost(
        f"ssh {host}: the connection failed (ssh: {said})",
        hint=f"`ssh {host} true` shows the same; check the network, a VPN, or the login node",
        retryable=retryable,
    )


class SshTransport(ProcessTransport):
    """Programs run over one master connection to ``host``; ``connect`` opens it, ``close``
    ends it (a context manager does both). ``interactive``: a terminal is there, so ssh may
    ask for a passphrase or password once, for the master."""

    def __init__(self, host: str, env: Mapping[str, str], *, interactive: bool = False) -> None:
        super().__init__(check_host(host))
        self.ssh = ssh_words(env)
        self.interactive = interactive
        self._dir: Path | None = None
        self._master: subprocess.Popen[bytes] | None = None
        self.connections = 0  # masters opened: one, unless the connection dropped

    def __enter__(self) -> SshTransport:
        self.connect()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def _socket(self) -> Path:
        if self._dir is None:
            raise RuntimeError("the ssh transport is not connected")
        return self._dir / CONTROL_NAME

    def _options(self) -> list[str]:
        # A host's RemoteCommand or forwardings in the user's config would take the place of
        # ddpimg's programs, or fail to bind a port a second time.
        return [
            "-o", f"ControlPath={self._socket}", "-o", "BatchMode=yes",
            "-o", "RemoteCommand=none", "-o", "ClearAllForwardings=yes",
        ]  # fmt: skip

    def connect(self) -> None:
        """Open the master connection; ConnectionLost (the reason ssh gave) when it fails."""
        if self._master is not None:
            return
        self._dir = Path(
            tempfile.mkdtemp(prefix=CONTROL_PREFIX, dir=control_parent(tempfile.gettempdir()))
        )
        errors = (self._dir / "master.err").open("wb")
        batch = [] if self.interactive else ["-o", "BatchMode=yes"]
        argv = [
            *self.ssh, "-o", "ControlMaster=yes", "-o", f"ControlPath={self._socket}",
            "-o", "ControlPersist=no", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
            "-o", f"ServerAliveInterval={ALIVE_INTERVAL_S}",
            "-o", f"ServerAliveCountMax={ALIVE_COUNT}", "-o", "RemoteCommand=none",
            "-o", "ClearAllForwardings=yes", *batch, "-N", "-T", self.host,
        ]  # fmt: skip
        with errors:
            self._master = subprocess.Popen(
                argv,
                stdin=None if self.interactive else subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                # Only a master that may prompt keeps the terminal (ssh asks on /dev/tty).
                start_new_session=not self.interactive,
            )
        self.connections += 1
        wait_s = CONNECT_TIMEOUT_S + READY_MARGIN_S
        deadline = None if self.interactive else time.monotonic() + wait_s
        while not self._socket.exists():
            if self._master.poll() is not None:
                error = connection_error(self.host, self._master_errors())
                self._discard()
                raise error
            if deadline is not None and time.monotonic() > deadline:
                self._discard()
                raise ConnectionLost(
                    f"ssh {self.host}: no connection within {wait_s:g} s",
                    hint=f"`ssh {self.host} true` shows where it hangs",
                    retryable=True,
                )
            time.sleep(_POLL_S)

    def _master_errors(self) -> str:
        if self._dir is None:
            return ""
        try:
            return (self._dir / "master.err").read_bytes()[-4096:].decode("utf-8", "replace")
        except OSError:
            return ""

    def argv(self, program: str) -> list[str]:
        if self._master is None or self._master.poll() is not None:
            # Without a master ssh would quietly open a connection of its own for this
            # program: the caller reconnects instead, and says so.
            said = self._master_errors()
            raise connection_error(self.host, said or "master is not running")
        return [*self.ssh, *self._options(), "-o", "ControlMaster=no", "-T", self.host,
                command_line(program)]  # fmt: skip

    def failed(self, completed: Completed, what: str) -> DdpimgError | None:
        if completed.status != SSH_FAILED:
            return None
        return connection_error(self.host, completed.error_text + "\n" + self._master_errors())

    def reconnect(self) -> None:
        """A new master connection after the old one dropped."""
        self.close()
        self.connect()

    def close(self) -> None:
        """End the master connection (the processes this object started) and its socket."""
        master, self._master = self._master, None
        if master is not None:
            if master.poll() is None and self._socket.exists():
                with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                    subprocess.run(
                        [*self.ssh, *self._options(), "-O", "exit", self.host],
                        stdin=subprocess.DEVNULL,
                        capture_output=True,
                        timeout=STOP_WAIT_S,
                        check=False,
                    )
            try:
                master.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                master.kill()
                master.wait(STOP_WAIT_S)
        self._discard()

    def _discard(self) -> None:
        master, self._master = self._master, None
        if master is not None and master.poll() is None:
            master.kill()
            master.wait(STOP_WAIT_S)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def interactive() -> bool:
    """Whether ssh may ask the user for a passphrase: stdin and stderr are a terminal."""
    return sys.stdin.isatty() and sys.stderr.isatty()
