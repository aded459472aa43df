"""What this machine has to build and run images: a Docker engine, the engines' Debian
packages, a GPU."""

from __future__ import annotations

import os
import shutil
import subprocess

from .locks import CONTAINERS
from .session import Session

ENGINE_SCRIPT = CONTAINERS / "engine.sh"
# Installs the Debian packages of every engine the tests use (docker.io, debootstrap, Slurm,
# Open MPI, ...); needs root.
ENGINE_PACKAGES_SCRIPT = "tests/engines/install.sh"


def engine(session: Session, *args: str) -> None:
    """containers/engine.sh: start dockerd (recording its PID), stop it, make the base image."""
    session.run("bash", str(ENGINE_SCRIPT), *args, external=True)


def engine_answers() -> bool:
    """Whether a Docker engine answers `docker info`."""
    found = shutil.which("docker")
    if found is None:
        return False
    probe = subprocess.run([found, "info"], capture_output=True, timeout=60, check=False)
    return probe.returncode == 0


def install_engine_packages(session: Session) -> None:
    """Install the engines' Debian packages when root; say so and go on otherwise."""
    if os.geteuid() == 0:
        session.run("bash", ENGINE_PACKAGES_SCRIPT, external=True)
    else:
        session.log(f"not root: not installing engine packages ({ENGINE_PACKAGES_SCRIPT})")


def gpu_missing() -> str | None:
    """Why no GPU can be used here (None when `nvidia-smi -L` lists one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "nvidia-smi is not on PATH"
    probe = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0 or "GPU" not in probe.stdout:
        return f"`nvidia-smi -L` lists no GPU: {(probe.stderr or probe.stdout).strip()[-200:]}"
    return None
