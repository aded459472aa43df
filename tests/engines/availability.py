"""Which test engines this machine has, and what a test that needs a missing one does.

Each engine marker (declared in pyproject.toml) has one availability check in ``CHECKS``.
A check returns None when the engine is usable, else the reason it is not. The policy:

- a test without engine markers always runs;
- a test whose engines are all available runs;
- otherwise it is skipped with the reason, unless ``DDPIMG_REQUIRE_ENGINES=1`` (CI), where
  a missing engine fails the test with the same reason. ``gpu`` is the exception: CI never
  has a GPU, so a missing GPU always skips.

``verdict()`` is that policy as a pure function, so it is tested without the engines.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

REQUIRE_VARIABLE = "DDPIMG_REQUIRE_ENGINES"
ALWAYS_MAY_SKIP = frozenset({"gpu"})
_INSTALL_HINT = "run `bash tests/engines/install.sh` as root"
_SBIN = "/usr/sbin:/sbin"


def _missing_commands(*names: str) -> str | None:
    missing = [name for name in names if shutil.which(name) is None]
    if not missing:
        return None
    # Debian installs the daemons in /usr/sbin, which is not on a normal user's PATH.
    if all(shutil.which(name, path=_SBIN) for name in missing):
        return f"not on PATH: {', '.join(missing)} (found in {_SBIN}: add it to PATH)"
    return f"not on PATH: {', '.join(missing)} ({_INSTALL_HINT})"


def _import_fails(module: str) -> str | None:
    try:
        importlib.import_module(module)
    except Exception as exc:
        return f"`import {module}` failed: {type(exc).__name__}: {exc}"
    return None


def _slurm() -> str | None:
    return _missing_commands("slurmctld", "slurmd", "srun", "munged")


def _mpi() -> str | None:
    return _missing_commands("mpirun") or _import_fails("mpi4py")


def _torchrun() -> str | None:
    return _import_fails("torch")


def _deepspeed() -> str | None:
    if importlib.util.find_spec("deepspeed") is None:
        return "deepspeed is not installed (requirements/train.txt)"
    return None


def _lightning() -> str | None:
    if importlib.util.find_spec("lightning") is None:
        return "lightning is not installed (requirements/train.txt)"
    return None


def _docker() -> str | None:
    if shutil.which("docker") is None:
        return "not on PATH: docker"
    try:
        info = subprocess.run(
            ["docker", "info"], capture_output=True, text=True, timeout=30, check=False
        )
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 30 s"
    if info.returncode != 0:
        return f"`docker info` failed: {info.stderr.strip()[-300:]}"
    return None


def _podman() -> str | None:
    missing = _missing_commands("podman", "podman-hpc", "runc", "fuse-overlayfs")
    if missing is not None:
        return missing
    try:
        info = subprocess.run(
            ["podman", "info"], capture_output=True, text=True, timeout=60, check=False
        )
    except subprocess.TimeoutExpired:
        return "`podman info` did not answer within 60 s"
    if info.returncode != 0:
        return f"`podman info` failed: {info.stderr.strip()[-300:]}"
    return None


def _multinode() -> str | None:
    # Namespaces, veths and the packet filter need CAP_NET_ADMIN and CAP_SYS_ADMIN.
    if os.geteuid() != 0:
        return "the namespace cluster (tests/engines/netns.py) must be built as root"
    return _missing_commands("ip", "nsenter", "unshare", "setpriv", "nft") or _slurm()


def _ssh() -> str | None:
    # The client and OpenSSH's own sshd (Debian: openssh-server; /usr/sbin), which the
    # tests run as root for an unprivileged user they make (useradd).
    missing = _missing_commands("ssh", "ssh-keygen")
    if missing is not None:
        return missing
    absent = [name for name in ("sshd", "useradd") if shutil.which(name, path=_SBIN) is None]
    if absent:
        return f"not in {_SBIN}: {', '.join(absent)} ({_INSTALL_HINT})"
    if os.geteuid() != 0:
        return "sshd and the login node's user need root"
    return None


def _shellcheck() -> str | None:
    return _missing_commands("shellcheck")


def _gpu() -> str | None:
    reason = _import_fails("torch")
    if reason is not None:
        return reason
    import torch

    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    return None


CHECKS: Mapping[str, Callable[[], str | None]] = {
    "slurm": _slurm,
    "mpi": _mpi,
    "torchrun": _torchrun,
    "deepspeed": _deepspeed,
    "lightning": _lightning,
    "docker": _docker,
    "podman": _podman,
    "multinode": _multinode,
    "shellcheck": _shellcheck,
    "ssh": _ssh,
    "gpu": _gpu,
}


@functools.cache
def missing_reason(engine: str) -> str | None:
    """Why ``engine`` is unusable here (None when usable); each check runs once."""
    return CHECKS[engine]()


def require_engines(env: Mapping[str, str]) -> bool:
    """Whether a missing engine is a failure: ``DDPIMG_REQUIRE_ENGINES`` is 1 (unset: 0)."""
    value = env.get(REQUIRE_VARIABLE, "0")
    if value not in ("0", "1"):
        raise ValueError(
            f"{REQUIRE_VARIABLE}={value!r}: expected 1 (missing engines fail tests) "
            "or 0 (missing engines skip tests)"
        )
    return value == "1"


@dataclass(frozen=True)
class Verdict:
    """What to do with one test: run it, skip it or fail it, and why."""

    action: Literal["run", "skip", "fail"]
    reason: str = ""


def verdict(markers: Iterable[str], missing: Callable[[str], str | None], require: bool) -> Verdict:
    """Apply the policy to a test's marker names; ``missing`` is ``missing_reason``."""
    reasons = {
        name: reason
        for name in dict.fromkeys(markers)
        if name in CHECKS and (reason := missing(name)) is not None
    }
    if not reasons:
        return Verdict("run")
    text = "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
    if require and not reasons.keys() <= ALWAYS_MAY_SKIP:
        return Verdict("fail", f"{REQUIRE_VARIABLE}=1 but engines are missing: {text}")
    return Verdict("skip", text)
