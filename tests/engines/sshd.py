"""OpenSSH's own ``sshd`` on the namespace cluster's login node, for the laptop's commands
(``ddpimg submit | follow | fetch | cancel``): the tests connect from the host, "the laptop",
with the real ``ssh`` client and a config file of the kind a user keeps in ``~/.ssh/config``.

``SshLogin(cluster, workdir)``:

- an unprivileged user ``USER`` (made if missing, removed at the end if made here), key-only:
  ``PasswordAuthentication no``, one authorized key, ``AllowUsers`` that user alone;
- ``sshd`` started in the login node's namespaces (``NamespaceCluster.start_login_node``) on
  three ports, each a login node of its own through ``Match LocalPort`` and ``SetEnv``: the
  real one (``HOST``: ddpimg under test on PATH, the cluster's ``SLURM_CONF``), one without
  ddpimg (``BARE``), and a hostile one whose ``scontrol``, ``sbatch`` and ``tar`` are the
  test's fakes (``HOSTILE``, ``hostile_bin``);
- ``ssh_config`` and ``known_hosts`` for the laptop (``laptop_env``: ``DDPIMG_SSH_COMMAND``),
  with a host whose key the server refuses (``REFUSED``);
- ``block()`` / ``unblock()``: the login node's port closed (TCP resets, connections dropped)
  and opened again, by a packet filter in its namespace;
- the user must read what runs there (the interpreter, the code under test): ``start`` grants
  "search" (o+x) on the directories above them that lack it, and ``stop`` takes back exactly
  those grants. What is under pytest's temporary directory cannot be granted: pytest makes
  ``/tmp/pytest-of-USER`` private again whenever a session starts (another lane, another
  developer's run), so the login node's files live in a directory of their own (``workdir``,
  removed by ``stop``), and so does the cluster (tests/multinode/conftest.py).

``stop`` cancels the user's jobs, stops sshd (the PID it started) and removes what ``start``
made. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import ddpimg
from tests.engines.netns import LOGIN, NamespaceCluster

USER = "ddpimg-ssh"
HOST, BARE, HOSTILE, REFUSED = "login", "login-bare", "login-hostile", "login-refused"
PORTS = {HOST: 22, BARE: 2201, HOSTILE: 2202}
BLOCK_TABLE = "ddpimg_login_block"
COMMAND_TIMEOUT_S = 30.0
START_WAIT_S = 30.0
USER_GONE_WAIT_S = 20.0
_POLL_S = 0.1


def _run(argv: list[str], **options: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False, **options
    )  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc  # type: ignore[no-any-return]


class SshLogin:
    """See the module docstring."""

    def __init__(
        self, cluster: NamespaceCluster, user_env: Mapping[str, str], also_read: Iterable[Path] = ()
    ) -> None:
        self.cluster = cluster
        self.also_read = [Path(path).resolve() for path in also_read]
        self.workdir = Path(tempfile.mkdtemp(prefix="ddpimg-login-")).resolve()
        self.workdir.chmod(0o755)
        self.user_env = dict(user_env) | cluster.env
        self.home = Path(f"/home/{USER}")
        self.hostile_bin = self.workdir / "hostile-bin"
        self.log = self.workdir / "sshd.log"
        self._sshd: subprocess.Popen[bytes] | None = None
        self._made_user = False
        self._granted: list[tuple[Path, int]] = []

    # -- for the tests -------------------------------------------------------------------

    @property
    def config(self) -> Path:
        return self.workdir / "ssh_config"

    def laptop_env(self, base: Mapping[str, str], state_home: Path) -> dict[str, str]:
        """``base`` with the laptop's ssh config and a state file of the test's own."""
        return dict(base) | {
            "DDPIMG_SSH_COMMAND": f"ssh -F {self.config}",
            "XDG_STATE_HOME": str(state_home),
        }

    def accepted(self) -> int:
        """Logins sshd accepted so far (each one connection)."""
        if not self.log.exists():
            return 0
        return self.log.read_text(errors="replace").count("Accepted publickey for")

    def block(self) -> None:
        """Reset every TCP packet to the login node's sshd ports: connections drop."""
        ports = ", ".join(str(port) for port in PORTS.values())
        rules = (
            f"table inet {BLOCK_TABLE} {{\n  chain input {{\n"
            "    type filter hook input priority filter; policy accept;\n"
            f"    tcp dport {{ {ports} }} reject with tcp reset\n  }}\n}}\n"
        )
        _run(self.cluster.on_node(LOGIN, ["nft", "-f", "-"]), input=rules)

    def unblock(self) -> None:
        _run(self.cluster.on_node(LOGIN, ["nft", "delete", "table", "inet", BLOCK_TABLE]))

    def as_user(self, argv: list[str]) -> list[str]:
        """``argv`` run as the login node's user, in its environment (for a test's setup)."""
        env = [f"{name}={value}" for name, value in self.user_env.items()]
        return ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups", "--",
                "env", "-i", f"HOME={self.home}", *env, *argv]  # fmt: skip

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> None:
        try:
            self._user()
            self._grant_search(self._needed_paths())
            self._keys()
            node = self.cluster.start_login_node()
            self._configs(node.mgmt_addr)
            self._start_sshd()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        self._cancel_jobs()
        sshd, self._sshd = self._sshd, None
        if sshd is not None and sshd.poll() is None:
            sshd.terminate()
            try:
                sshd.wait(10)
            except subprocess.TimeoutExpired:
                sshd.kill()
                sshd.wait(10)
        for path, mode in reversed(self._granted):
            with contextlib.suppress(OSError):
                path.chmod(mode)
        self._granted.clear()
        if self._made_user:
            self._remove_user()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- parts ---------------------------------------------------------------------------

    def _user(self) -> None:
        try:
            pwd.getpwnam(USER)
        except KeyError:
            _run(["useradd", "--create-home", "--home-dir", str(self.home), "--shell",
                  "/bin/bash", USER])  # fmt: skip
            self._made_user = True
        # "*": no password can match, and the account is not "locked" (sshd refuses those).
        _run(["usermod", "--password", "*", USER])
        entry = pwd.getpwnam(USER)
        self.home = Path(entry.pw_dir)
        # A fresh home for this session: an earlier session's staged files would make the
        # first submit here copy nothing.
        for child in self.home.iterdir() if self.home.exists() else ():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        # The user's temporary files (torch's caches among them) stay in its home, which
        # userdel removes, rather than in the machine's /tmp.
        for folder in (self.home, self.home / "tmp"):
            folder.mkdir(parents=True, exist_ok=True)
            os.chown(folder, entry.pw_uid, entry.pw_gid)
        self.user_env["TMPDIR"] = str(self.home / "tmp")

    def _remove_user(self) -> None:
        """userdel, once the user's last processes (an ssh session closing, a job's step
        ending) are gone: userdel refuses a user that still runs something."""
        uid = pwd.getpwnam(USER).pw_uid
        deadline = time.monotonic() + USER_GONE_WAIT_S
        while _processes_of(uid) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        proc = subprocess.run(
            ["userdel", "--remove", USER], capture_output=True, text=True, timeout=60, check=False
        )
        if proc.returncode != 0:
            left = _processes_of(uid)
            listing = subprocess.run(
                ["ps", "-o", "pid,ppid,etime,args", "-p", ",".join(map(str, left))],
                capture_output=True, text=True, timeout=30, check=False,
            ).stdout if left else ""  # fmt: skip
            raise RuntimeError(f"userdel {USER} failed: {proc.stderr.strip()}\n{listing}")
        self._made_user = False

    def _needed_paths(self) -> list[Path]:
        package = Path(ddpimg.__file__).resolve().parent.parent
        interpreter = Path(sys.executable).resolve()
        conf = Path(self.cluster.env["SLURM_CONF"])
        return [interpreter, Path(sys.prefix), package, conf, self.workdir, *self.also_read]

    def _grant_search(self, paths: Iterable[Path]) -> None:
        """o+x on every directory above ``paths`` (and on ``workdir``) that lacks it."""
        folders: list[Path] = []
        for path in paths:
            folders += (
                [*reversed(path.parents), path] if path.is_dir() else list(reversed(path.parents))
            )
        for folder in dict.fromkeys(folders):
            mode = stat.S_IMODE(folder.stat().st_mode)
            if not mode & stat.S_IXOTH:
                folder.chmod(mode | stat.S_IXOTH)
                self._granted.append((folder, mode))

    def _keys(self) -> None:
        for name in ("host_key", "user_key", "other_key"):
            key = self.workdir / name
            if not key.exists():
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)])
        authorized = self.workdir / "authorized_keys"
        authorized.write_text((self.workdir / "user_key.pub").read_text())
        authorized.chmod(0o644)

    def _configs(self, address: str) -> None:
        self.hostile_bin.mkdir(exist_ok=True)
        self.hostile_bin.chmod(0o755)
        path = self.user_env.get("PATH", "/usr/bin:/bin")
        bare_path = "/usr/local/bin:/usr/bin:/bin"
        lines = [
            *(f"Port {port}" for port in PORTS.values()),
            f"ListenAddress {address}",
            f"HostKey {self.workdir / 'host_key'}",
            "PidFile none",
            "UsePAM no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}",
            # The test's files are root's, under root's temporary directories.
            "StrictModes no",
            f"AllowUsers {USER}",
            "LogLevel INFO",
            # A session whose client vanished (its connection reset by block()) ends within
            # seconds, not TCP's hours: the user's processes are gone by the end.
            "ClientAliveInterval 2",
            "ClientAliveCountMax 3",
            "Match LocalPort " + str(PORTS[HOST]),
            "    SetEnv " + _set_env(self.user_env),
            "Match LocalPort " + str(PORTS[BARE]),
            "    SetEnv " + _set_env(self.user_env | {"PATH": bare_path}),
            "Match LocalPort " + str(PORTS[HOSTILE]),
            "    SetEnv " + _set_env(self.user_env | {"PATH": f"{self.hostile_bin}:{path}"}),
        ]
        (self.workdir / "sshd_config").write_text("\n".join(lines) + "\n")
        hosts = []
        for alias, port in PORTS.items():
            hosts += [f"Host {alias}", f"    HostName {address}", f"    Port {port}"]
            hosts += self._client_lines("user_key")
        hosts += [f"Host {REFUSED}", f"    HostName {address}", f"    Port {PORTS[HOST]}"]
        hosts += self._client_lines("other_key")
        self.config.write_text("\n".join(hosts) + "\n")
        host_key = (self.workdir / "host_key.pub").read_text().split()[:2]
        # ssh names a host on port 22 by its address alone, on another port as [address]:port.
        names = [address if port == 22 else f"[{address}]:{port}" for port in PORTS.values()]
        (self.workdir / "known_hosts").write_text(
            "".join(f"{name} {' '.join(host_key)}\n" for name in names)
        )

    def _client_lines(self, key: str) -> list[str]:
        return [
            f"    User {USER}",
            f"    IdentityFile {self.workdir / key}",
            "    IdentitiesOnly yes",
            "    IdentityAgent none",
            f"    UserKnownHostsFile {self.workdir / 'known_hosts'}",
            "    StrictHostKeyChecking yes",
            "    ConnectTimeout 10",
        ]

    def _start_sshd(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation directory
        sshd = shutil.which("sshd", path="/usr/sbin:/sbin") or "/usr/sbin/sshd"
        config = str(self.workdir / "sshd_config")
        argv = ["setpriv", "--pdeathsig", "TERM", "--",
                *self.cluster.on_node(LOGIN, [sshd, "-D", "-e", "-f", config])]  # fmt: skip
        with self.log.open("ab") as log:
            self._sshd = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + START_WAIT_S
        while self.log.read_text(errors="replace").count("Server listening on") < len(PORTS):
            if self._sshd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not start: {self.log.read_text(errors='replace')}")
            time.sleep(_POLL_S)

    def _cancel_jobs(self) -> None:
        """Cancel the user's jobs (LocalSlurm cancels only root's) and wait, bounded."""
        if self.cluster.slurm is None or not self.cluster.slurm.pids:
            return
        env = dict(os.environ) | self.cluster.env
        deadline = time.monotonic() + 20
        subprocess.run(
            ["scancel", f"--user={USER}"], env=env, capture_output=True, timeout=30, check=False
        )
        while time.monotonic() < deadline:
            queue = subprocess.run(
                ["squeue", "--noheader", f"--user={USER}", "-o", "%i"],
                env=env, capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            if queue.returncode != 0 or not queue.stdout.strip():
                return
            time.sleep(0.5)


def _processes_of(uid: int) -> list[int]:
    """PIDs of the processes of user ``uid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    found.append(int(entry.name))
    return found


def _set_env(env: Mapping[str, str]) -> str:
    for name, value in env.items():
        if '"' in value or "\n" in value:
            raise ValueError(f"{name}={value!r} cannot be written into sshd_config")
    return " ".join(f'"{name}={value}"' for name, value in env.items())
