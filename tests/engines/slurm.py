"""A private, real Slurm cluster on this machine, for the integration tests.

``LocalSlurm(workdir)`` starts its own ``munged``, ``slurmctld`` and ``slurmd`` from a
generated ``slurm.conf``: its own munge key and socket (``AuthInfo=socket=...``), free TCP
ports picked at start, and every state, spool, log and pid path under ``workdir``. A system
Slurm running on the same machine is neither used nor disturbed. Client commands (``srun``,
``sbatch``, ``sinfo``) reach this cluster through the variables in ``LocalSlurm.env``.

Choices that are not obvious:

- The node has ``max(nproc, MIN_CPUS)`` CPUs and ``SlurmdParameters=config_overrides``:
  the tests need ``srun -n 4`` on a 2-core machine. Partition oversubscription does not
  help there, because it lets *jobs* share cores, while one job's tasks still need one CPU
  each; ``config_overrides`` makes slurmd report the configured CPUs instead of draining
  the node for "Low CPUs".
- Node and controller addresses are 127.0.0.1, so the cluster works even where the
  machine's hostname does not resolve. Several nodes (``nodes=``) each get their own
  address and a command prefix that starts their slurmd "on" them (the network-namespace
  cluster of ``tests/engines/netns.py`` enters the node's namespaces); spool, pid and log
  files are then per node (``%n``).
- The daemons run in the foreground (``-F`` / ``-D``), so the PIDs recorded here are the
  daemons themselves; ``stop()`` signals exactly those and nothing found by name. They are
  started through ``setpriv --pdeathsig TERM`` so that they receive SIGTERM when the
  process that started them dies: a killed test run does not leave a cluster behind.
- munged runs as root: munge 0.5.15 (Debian 12) accepts that. Its key, socket and seed
  live in a fresh ``/tmp/ddpimg-munge-*`` directory (mode 0711), not under
  ``workdir``: munged insists that every directory above its socket is executable by all
  (pytest's temporary directories are 0700) and socket paths are limited to 107 bytes.
  ``start()`` proves munge works with ``munge -n | unmunge`` on that socket.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

MIN_CPUS = 4
PARTITION = "debug"
STOP_WAIT_S = 10.0
_POLL_S = 0.2
_LOG_TAIL_LINES = 25
# A daemon's stdout repeats its log file; only its last lines (a fatal error from before
# the log file was opened) add anything.
_STDOUT_TAIL_LINES = 6


class LocalSlurmError(RuntimeError):
    """The private cluster could not be started or used; the message has the log tails."""


def _free_ports(count: int) -> list[int]:
    """Ports free on every address right now (held open together so they differ)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _total_memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise LocalSlurmError("/proc/meminfo has no MemTotal line")


def _tail(path: Path, lines: int) -> str:
    if not path.exists():
        return f"--- {path}: (not written)"
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return f"--- {path} (last {len(text)} lines)\n" + "\n".join(text)


def parse_mpi_plugins(output: str) -> tuple[str, ...]:
    """Plugin names from ``srun --mpi=list``.

    Slurm 22.05 prints an indented list of types and, for PMIx, a line
    ``specific pmix plugin versions available: pmix_v4``; both kinds are returned.
    """
    names: list[str] = []
    for line in output.splitlines():
        if line[:1].isspace() and line.strip():
            names.append(line.strip())
        elif "versions available:" in line:
            names.extend(re.split(r"[\s,]+", line.split(":", 1)[1].strip()))
    return tuple(name for name in names if name)


@dataclass(frozen=True)
class DeclaredHardware:
    """What slurm.conf declares beyond CPUs and memory: ``gres`` of every node
    (``gpu:a100:2``; ``GresTypes`` must name it), ``gres_conf`` (gres.conf's content) and
    more ``partitions`` over every node, as (name, limits such as ``MaxTime=2-00:00:00``)."""

    gres: str = ""
    gres_conf: str = ""
    partitions: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SlurmNode:
    """One slurmd: its node name, the address slurmctld and srun reach it at, and the command
    prefix that starts a process on that node (empty: this machine as it is)."""

    name: str
    addr: str = "127.0.0.1"
    prefix: tuple[str, ...] = ()


class LocalSlurm:
    """A Slurm cluster whose files live under ``workdir`` (munge's: see above).

    By default one node, this machine, at 127.0.0.1. ``nodes`` replaces it with several;
    ``controller_addr`` is where the nodes reach slurmctld; ``settings`` add to or replace
    ``slurm.conf`` keys (e.g. ``SlurmdPort``, ``SrunPortRange``); ``mpi_settings``, when
    given, are written to ``mpi.conf`` (e.g. ``PMIxDirectConn``). ``hardware`` declares what
    the nodes have beyond CPUs and memory (GRES, more partitions), as a site's slurm.conf does.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        cpus: int | None = None,
        nodes: Sequence[SlurmNode] = (),
        controller_addr: str = "127.0.0.1",
        settings: Mapping[str, object] | None = None,
        mpi_settings: Mapping[str, object] | None = None,
        hardware: DeclaredHardware | None = None,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.host = socket.gethostname().split(".")[0]
        self.nodes = tuple(nodes) or (SlurmNode(self.host),)
        self.controller_addr = controller_addr
        self.settings = dict(settings or {})
        self.mpi_settings = dict(mpi_settings or {})
        self.hardware = hardware or DeclaredHardware()
        self.cpus = cpus if cpus is not None else max(os.cpu_count() or 1, MIN_CPUS)
        self.conf_path = self.workdir / "slurm.conf"
        self.munge_dir: Path | None = None
        self.mpi_plugins: tuple[str, ...] = ()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, Path] = {}

    @property
    def env(self) -> dict[str, str]:
        """Variables to add to a subprocess environment so Slurm commands use this cluster."""
        return {"SLURM_CONF": str(self.conf_path)}

    @property
    def munge_socket(self) -> Path:
        """The private munged's socket (exists only while started)."""
        if self.munge_dir is None:
            raise LocalSlurmError(f"LocalSlurm in {self.workdir} is not started")
        return self.munge_dir / "munge.sock"

    @property
    def pids(self) -> dict[str, int]:
        """PIDs of the daemons started and not yet stopped, by daemon name."""
        return {name: proc.pid for name, proc in self._procs.items()}

    def client_env(self) -> dict[str, str]:
        """This process's environment without outside Slurm variables, plus ``env``."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        return base | self.env

    def __enter__(self) -> LocalSlurm:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(node.name for node in self.nodes)

    def start(self, timeout_s: float = 60) -> None:
        """Start munged, slurmctld and every slurmd; return once ``srun`` on all nodes works."""
        if self._procs:
            raise LocalSlurmError(f"LocalSlurm in {self.workdir} is already started")
        deadline = time.monotonic() + timeout_s
        try:
            self._start_munge(deadline)
            self._write_conf()
            self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.conf_path)])
            self._wait(deadline, "slurmctld answers scontrol ping", self._controller_up)
            for node in self.nodes:
                self._spawn(
                    self._slurmd_name(node),
                    ["slurmd", "-D", "-N", node.name, "-f", str(self.conf_path)],
                    prefix=node.prefix,
                )
            names = ",".join(self.node_names)
            self._wait(deadline, f"nodes {names} are idle", self._nodes_idle)
            self._wait(deadline, f"srun -N {len(self.nodes)} true succeeds", self._srun_works)
            listing = self._client(["srun", "--mpi=list"], deadline)
            self.mpi_plugins = parse_mpi_plugins(listing.stdout + listing.stderr)
        except BaseException as exc:
            logs = "\n".join(
                _tail(path, _STDOUT_TAIL_LINES if path.suffix == ".out" else _LOG_TAIL_LINES)
                for path in self._logs.values()
            )
            self.stop()
            if isinstance(exc, LocalSlurmError | subprocess.SubprocessError | OSError):
                raise LocalSlurmError(f"{exc}\n{logs}") from exc
            raise

    def stop(self) -> None:
        """Cancel this cluster's jobs, then stop the daemons it started (idempotent)."""
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            self._cancel_all_jobs()
        for name in reversed(list(self._procs)):
            proc = self._procs.pop(name)
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(STOP_WAIT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(STOP_WAIT_S)
        if self.munge_dir is not None:
            shutil.rmtree(self.munge_dir, ignore_errors=True)
            self.munge_dir = None

    def _start_munge(self, deadline: float) -> None:
        self.munge_dir = Path(tempfile.mkdtemp(prefix="ddpimg-munge-"))
        self.munge_dir.chmod(0o711)
        key = self.munge_dir / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(1024))
        self._logs["munged"] = self.workdir / "log" / "munged.log"
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={self.munge_dir / 'munged.pid'}",
                f"--log-file={self._logs['munged']}",
                f"--seed-file={self.munge_dir / 'munged.seed'}",
            ],
        )
        self._wait(deadline, "munge -n | unmunge works on the private socket", self._munge_works)

    def _write_conf(self) -> None:
        ctld_port, slurmd_port = _free_ports(2)
        for sub in ("state", "log", "run"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        # Per node, for when several share one file system: PMIx puts its clients' files
        # under TmpFS with names that are per step only.
        for node in self.nodes:
            for sub in ("spool", "tmp"):
                (self.workdir / sub / node.name).mkdir(parents=True, exist_ok=True)
        plugstack = self.workdir / "plugstack.conf"
        plugstack.write_text("")
        log = self.workdir / "log"
        run = self.workdir / "run"
        self._logs["slurmctld"] = log / "slurmctld.log"
        for node in self.nodes:
            self._logs[self._slurmd_name(node)] = log / f"slurmd-{node.name}.log"
        real_memory = max(_total_memory_mb() - 1024, 256)
        settings = {
            "ClusterName": "ddpimgtest",
            "SlurmctldHost": f"{self.host}({self.controller_addr})",
            "SlurmctldPort": ctld_port,
            "SlurmdPort": slurmd_port,
            "SlurmUser": "root",
            "SlurmdUser": "root",
            "AuthType": "auth/munge",
            "CredType": "cred/munge",
            "AuthInfo": f"socket={self.munge_socket}",
            "StateSaveLocation": self.workdir / "state",
            "SlurmdSpoolDir": self.workdir / "spool" / "%n",
            "TmpFS": self.workdir / "tmp" / "%n",
            "SlurmctldPidFile": run / "slurmctld.pid",
            "SlurmdPidFile": run / "slurmd-%n.pid",
            "SlurmctldLogFile": self._logs["slurmctld"],
            "SlurmdLogFile": log / "slurmd-%n.log",
            "SlurmctldDebug": "info",
            "SlurmdDebug": "info",
            "PlugStackConfig": plugstack,
            "ProctrackType": "proctrack/linuxproc",
            "TaskPlugin": "task/none",
            "SwitchType": "switch/none",
            "MpiDefault": "none",
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_Core",
            "SchedulerType": "sched/backfill",
            # A requeued job released for "now + 3 s" (tests/integration/test_sbatch.py) waits
            # for the next periodic pass of the main scheduler (sched_interval, 60 s by
            # default: man slurm.conf, 22.05; measured: started 38 s after its begin time) or
            # of backfill (bf_interval, 30 s; it also skips a pass when no job, node or
            # partition changed, and a begin time passing is no change). A pass a second of
            # each costs nothing with a handful of jobs.
            "SchedulerParameters": "sched_interval=1,bf_interval=1",
            "SlurmdParameters": "config_overrides",
            "AccountingStorageType": "accounting_storage/none",
            "JobAcctGatherType": "jobacct_gather/none",
            "JobCompType": "jobcomp/none",
            "ReturnToService": 2,
            "KillWait": 5,
            "InactiveLimit": 0,
            "MailProg": "/bin/true",
        } | self.settings
        lines = [f"{key}={value}" for key, value in settings.items()]
        gres = f" Gres={self.hardware.gres}" if self.hardware.gres else ""
        lines += [
            f"NodeName={node.name} NodeAddr={node.addr} NodeHostname={node.name} "
            f"CPUs={self.cpus} RealMemory={real_memory}{gres} State=UNKNOWN"
            for node in self.nodes
        ]
        everyone = ",".join(self.node_names)
        lines.append(
            f"PartitionName={PARTITION} Nodes={everyone} Default=YES "
            "MaxTime=INFINITE OverSubscribe=YES State=UP"
        )
        lines += [
            f"PartitionName={name} Nodes={everyone} {limits} OverSubscribe=YES State=UP"
            for name, limits in self.hardware.partitions
        ]
        self.conf_path.write_text("\n".join(lines) + "\n")
        if self.hardware.gres_conf:
            # Slurm reads gres.conf from the directory of slurm.conf.
            (self.workdir / "gres.conf").write_text(self.hardware.gres_conf + "\n")
        if self.mpi_settings:
            # Slurm reads mpi.conf from the directory of slurm.conf.
            mpi_lines = [f"{key}={value}" for key, value in self.mpi_settings.items()]
            (self.workdir / "mpi.conf").write_text("\n".join(mpi_lines) + "\n")

    @staticmethod
    def _slurmd_name(node: SlurmNode) -> str:
        return f"slurmd {node.name}"

    def _spawn(self, name: str, argv: list[str], prefix: Sequence[str] = ()) -> None:
        executable = shutil.which(argv[0])
        if executable is None:
            raise LocalSlurmError(f"{argv[0]} is not on PATH; run tests/engines/install.sh")
        # setpriv sets the parent-death signal and then execs (so does the prefix, e.g.
        # nsenter), so the PID stays the daemon's.
        setpriv = ["setpriv", "--pdeathsig", "TERM", "--", *prefix]
        out = self.workdir / "log" / f"{name.replace(' ', '-')}.out"
        out.parent.mkdir(parents=True, exist_ok=True)
        self._logs[f"{name} stdout"] = out
        with out.open("ab") as handle:
            self._procs[name] = subprocess.Popen(
                [*setpriv, executable, *argv[1:]],
                stdin=subprocess.DEVNULL,
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=self.client_env(),
                start_new_session=True,
            )

    def _wait(self, deadline: float, what: str, probe: Callable[[float], str | None]) -> None:
        """Poll ``probe`` until it reports nothing wrong; fail early if a daemon died.

        A probe returns None when ready, else what it saw, for the timeout message.
        """
        while True:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise LocalSlurmError(
                        f"{name} exited with status {proc.returncode} while waiting until {what}"
                    )
            seen = probe(deadline)
            if seen is None:
                return
            if time.monotonic() > deadline:
                raise LocalSlurmError(f"timed out waiting until {what}; last seen: {seen}")
            time.sleep(_POLL_S)

    def _client(
        self, argv: list[str], deadline: float, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a client command against this cluster, bounded by ``deadline``."""
        budget = max(deadline - time.monotonic(), 1.0)
        return subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            env=self.client_env(),
            timeout=min(budget, 30.0),
            check=False,
        )

    def _munge_works(self, deadline: float) -> str | None:
        sock = f"--socket={self.munge_socket}"
        cred = self._client(["munge", "--no-input", sock], deadline)
        if cred.returncode != 0:
            return f"munge: {cred.stderr.strip()}"
        check = self._client(["unmunge", sock], deadline, stdin=cred.stdout)
        return None if check.returncode == 0 else f"unmunge: {check.stderr.strip()}"

    def _controller_up(self, deadline: float) -> str | None:
        ping = self._client(["scontrol", "ping"], deadline)
        if ping.returncode == 0 and "is UP" in ping.stdout:
            return None
        return (ping.stdout + ping.stderr).strip()

    def _nodes_idle(self, deadline: float) -> str | None:
        info = self._client(["sinfo", "--noheader", "-N", "-o", "%N %T"], deadline)
        states = dict(line.split(None, 1) for line in info.stdout.splitlines() if " " in line)
        waiting = {name: states.get(name, "") for name in self.node_names}
        waiting = {name: state for name, state in waiting.items() if state != "idle"}
        if not waiting:
            return None
        for name, state in waiting.items():
            # ReturnToService=2 brings back a node that was down for not responding, but not
            # one drained by a previous registration; a trailing * means "not responding yet".
            if state.startswith(("drain", "down")) and not state.endswith("*"):
                self._client(["scontrol", "update", f"nodename={name}", "state=resume"], deadline)
        return f"node states {waiting} {info.stderr.strip()}".strip()

    def _srun_works(self, deadline: float) -> str | None:
        step = self._client(["srun", "-N", str(len(self.nodes)), "true"], deadline)
        return None if step.returncode == 0 else step.stderr.strip()

    def _cancel_all_jobs(self) -> None:
        """Cancel every job so no slurmstepd outlives slurmd (bounded wait)."""
        deadline = time.monotonic() + STOP_WAIT_S
        try:
            self._client(["scancel", f"--user={os.getuid()}"], deadline)
            while time.monotonic() < deadline:
                queue = self._client(["squeue", "--noheader", "-o", "%i"], deadline)
                if queue.returncode != 0 or not queue.stdout.strip():
                    return
                time.sleep(_POLL_S)
        except subprocess.TimeoutExpired:
            return
