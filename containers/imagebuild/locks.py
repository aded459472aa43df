"""The lock files: one per torch build, made from one input list by `nox -s lock`.

containers/lock/NAME.txt is what an image's pip installs (hashed, nothing else); the
Dockerfile's TORCH_SOURCE build argument names it. src/ddpimg/hardware/builds.py describes
each lock's hardware.
"""

from __future__ import annotations

import dataclasses
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from ddpimg.imagenames import image_names

from .session import Session

CONTAINERS = Path("containers")
LOCK_DIR = CONTAINERS / "lock"
LOCK_INPUT = CONTAINERS / "requirements.in"


@dataclasses.dataclass(frozen=True)
class Platform:
    """A CPU and the oldest glibc an image built for it has: what a lock is resolved for."""

    machine: str  # platform.machine() of the image: "aarch64"
    docker: str  # docker build --platform: "linux/arm64"
    glibc: tuple[int, int]  # manylinux_2_28 is (2, 28)

    @property
    def uv(self) -> str:
        """uv's --python-platform: aarch64-manylinux_2_28."""
        return f"{self.machine}-manylinux_{self.glibc[0]}_{self.glibc[1]}"


@dataclasses.dataclass(frozen=True)
class Lock:
    """How `nox -s lock` makes containers/lock/NAME.txt from LOCK_INPUT, and what an image
    built from it needs."""

    index: str | None = None  # where torch comes from; None: PyPI's own wheels
    # Pins that replace LOCK_INPUT's (uv --override): another torch from the same input list.
    overrides: Path | None = None
    # GPU_BASE for the gpu flavour; None: the Dockerfile's default (CUDA 13). The CUDA base
    # must not be newer than torch's CUDA: the NVIDIA container runtime refuses to start an
    # image whose NVIDIA_REQUIRE_CUDA the host's driver does not meet.
    gpu_base: str | None = None
    tag_suffix: str = ""  # "-VARIANT": ddpimg.imagenames names the images of that variant
    # The one platform the lock is resolved for (uv's --python-platform), at LOCK_PYTHON: its
    # pins hold there and for the newer Pythons of the bases. None: universal (x86-64 and
    # aarch64, every Python from LOCK_PYTHON on, with markers). Either way each pin's hashes
    # are those of all its files.
    platform: Platform | None = None


# The CUDA 12.8 runtime base of the V100 / pre-580-driver flavour. The digest is that of the
# tag's multi-platform index; `docker buildx imagetools inspect TAG` shows it.
CUDA_12_8_BASE = (
    "nvidia/cuda:12.8.1-base-ubuntu24.04"
    "@sha256:133c78a0575303be34164d0b90137a042172bdf60696af01a3c424ab402d86e2"
)
# torch's aarch64 wheels are manylinux_2_28 (glibc 2.28: RHEL 8, Debian 10, Ubuntu 20.04 on).
AARCH64 = Platform(machine="aarch64", docker="linux/arm64", glibc=(2, 28))
LOCKS: dict[str, Lock] = {
    "pypi": Lock(),  # PyPI's torch as requirements/train.txt pins it: CUDA 13, no V100
    # PyTorch's CPU wheels: a smaller cpu image. Not committed: its index is out of reach
    # from this project's machines; `nox -s lock -- cpu` makes it where it is reachable.
    "cpu": Lock(index="https://download.pytorch.org/whl/cpu"),
    # PyPI's last CUDA 12.8 torch: V100 (sm 7.0) and drivers older than 580.
    "pypi-cu128": Lock(
        overrides=CONTAINERS / "overrides" / "pypi-cu128.txt",
        gpu_base=CUDA_12_8_BASE,
        tag_suffix="-cu128",
    ),
    # PyPI's torch for aarch64 (GH200: Grace CPU + H100 GPU), the same CUDA 13 release as
    # pypi's; its image is built for linux/arm64 (docs/containers.md).
    "pypi-arm64": Lock(platform=AARCH64, tag_suffix="-arm64"),
}
# Both flavours' lock when none is named: the Dockerfile's TORCH_SOURCE default, committed,
# so that the Dockerfile's own example command works on a fresh checkout. Its torch (CUDA
# 13) runs on the CPU too; `--torch cpu` takes the smaller CPU build where that lock exists.
DEFAULT_LOCK = "pypi"
# The oldest Python among the bases (Debian 12: 3.11; Ubuntu 24.04: 3.12): every lock is
# resolved for it, and a universal one for every newer Python as well.
LOCK_PYTHON = "3.11"
UV = "uv==0.13.8"


def lock_file(name: str) -> Path:
    return LOCK_DIR / f"{name}.txt"


def variant(lock: str) -> str:
    """The image variant of ``lock`` (``cu128``; ``""`` for the default build)."""
    return LOCKS[lock].tag_suffix.removeprefix("-")


def default_tag(flavour: str, lock: str) -> str:
    """ddpimg:FLAVOUR, plus the lock's suffix (ddpimg:gpu-cu128)."""
    return image_names(flavour, variant(lock)).tag


def missing_lock(name: str) -> str | None:
    """Why the lock ``name`` cannot be built from (None when its file exists)."""
    path = lock_file(name)
    if path.is_file():
        return None
    return (
        f"{path} does not exist: make it with `nox -s lock -- {name}` where "
        f"{LOCKS[name].index or 'PyPI'} is reachable, or build with --torch {DEFAULT_LOCK}"
    )


def compile_command(name: str) -> list[str]:
    """uv's command that writes lock_file(``name``) (the index, if any, is added by make)."""
    lock = LOCKS[name]
    platform = ["--universal"] if lock.platform is None else ["--python-platform", lock.platform.uv]
    command = [
        "uv", "pip", "compile", "--quiet", str(LOCK_INPUT), *platform,
        "--python-version", LOCK_PYTHON, "--generate-hashes", "--native-tls",
        "--custom-compile-command", f"nox -s lock -- {name}",
        "--output-file", str(lock_file(name)),
    ]  # fmt: skip
    overrides = lock.overrides
    if overrides is not None:
        command += ["--override", str(overrides)]
    return command


def unreachable(url: str) -> str | None:
    """Why ``url`` cannot be fetched (None when it can)."""
    try:
        with urllib.request.urlopen(url, timeout=20):
            return None
    except (urllib.error.URLError, OSError) as err:
        return f"{url}: {getattr(err, 'reason', err)}"


def make(session: Session, names: Sequence[str]) -> None:
    """Make the locks ``names`` (every lock when empty). A lock whose index cannot be reached
    fails when named, and is skipped with a warning when all are made."""
    unknown = sorted(set(names) - set(LOCKS))
    if unknown:
        session.error(f"unknown lock {', '.join(unknown)}: choose from {', '.join(LOCKS)}")
    session.install(UV)
    skipped = []
    for name in names or list(LOCKS):
        command = compile_command(name)
        index = LOCKS[name].index
        if index is not None:
            reason = unreachable(f"{index}/torch/")
            if reason is not None:
                if names:
                    session.error(f"lock {name}: its index cannot be reached: {reason}")
                skipped.append(f"{name} ({reason})")
                continue
            command += ["--extra-index-url", index]  # uv: searched before --index-url
        session.run(*command)
    if skipped:
        session.warn(f"not made (index unreachable from here): {'; '.join(skipped)}")
