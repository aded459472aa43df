"""The lock files: one per torch build, made from one input list by `nox -s lock`.

containers/lock/NAME.txt is what an image's pip installs (hashed, nothing else); the
Dockerfile's TORCH_SOURCE build argument names it. src/ddpimg/hardware/builds.py describes
each lock's hardware.
"""

from __future__ import annotations

import dataclasses
import os
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from ddpimg.imagenames import image_names

from .session import Session

CONTAINERS = Path("containers")
LOCK_DIR = CONTAINERS / "lock"
LOCK_INPUT = CONTAINERS / "requirements.in"


@dataclasses.dataclass(frozen=True)
class Platform:
    """A CPU and the oldest glibc an image built for it has: what a lock is resolved for,
    and what a machine of another CPU needs to know to fetch and install its wheels."""

    machine: str  # platform.machine() of the image, Python's and pip's name: "aarch64"
    arch: str  # Debian's and Docker's name: "arm64"
    glibc: tuple[int, int]  # manylinux_2_28 is (2, 28)

    @property
    def docker(self) -> str:
        """docker build --platform: linux/arm64."""
        return f"linux/{self.arch}"

    @property
    def python(self) -> str:
        """sysconfig.get_platform() on it: linux-aarch64 (install-python.sh CROSS_PLATFORM)."""
        return f"linux-{self.machine}"

    @property
    def uv(self) -> str:
        """uv's --python-platform: aarch64-manylinux_2_28."""
        return f"{self.machine}-manylinux_{self.glibc[0]}_{self.glibc[1]}"

    def wheel_tags(self) -> list[str]:
        """The platform tags of the wheels it runs, most specific first: every manylinux tag
        its glibc accepts down to manylinux2014 (glibc 2.17). pip takes the tags it is given
        literally, and the locked files use many of them (torch manylinux_2_28, cuDNN 2_27,
        cupti 2_25, NCCL 2_18, others manylinux2014)."""
        major, newest = self.glibc
        tags = [f"manylinux_{major}_{minor}_{self.machine}" for minor in range(newest, 16, -1)]
        return [*tags, f"manylinux2014_{self.machine}"]

    def pip_args(self, python_version: str) -> list[str]:
        """pip download's options for its wheels for CPython ``python_version`` ("3.11")."""
        abi = "cp" + python_version.replace(".", "")
        tags = [word for tag in self.wheel_tags() for word in ("--platform", tag)]
        return [*tags, "--python-version", python_version, "--implementation", "cp", "--abi", abi]


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
    # Why the lock departs from LOCK_INPUT, one sentence each: make() writes them into the
    # lock as "# note: " lines, the image's build-info file records them (build_info.py) and
    # `ddpimg doctor` prints them.
    notes: tuple[str, ...] = ()


# The CUDA 12.8 runtime base of the V100 / pre-580-driver flavour. The digest is that of the
# tag's multi-platform index; `docker buildx imagetools inspect TAG` shows it.
CUDA_12_8_BASE = (
    "nvidia/cuda:12.8.1-base-ubuntu24.04"
    "@sha256:133c78a0575303be34164d0b90137a042172bdf60696af01a3c424ab402d86e2"
)
# torch's aarch64 wheels are manylinux_2_28 (glibc 2.28: RHEL 8, Debian 10, Ubuntu 20.04 on).
AARCH64 = Platform(machine="aarch64", arch="arm64", glibc=(2, 28))
LOCKS: dict[str, Lock] = {
    "pypi": Lock(),  # PyPI's torch as requirements/train.txt pins it: CUDA 13, no V100
    # PyTorch's CPU wheels: the cpu image, without CUDA's libraries (about 5 GB less). Its
    # index is out of reach from this project's machines, but its torch 2.13.0 wheel lies
    # in their pip's find-links directory (PIP_FIND_LINKS, which make() passes to uv).
    # Universal as pypi's is, but hashed (and so installable) for the x86-64 wheel alone:
    # the one file of it these machines have.
    "cpu": Lock(
        index="https://download.pytorch.org/whl/cpu",
        overrides=CONTAINERS / "overrides" / "cpu.txt",
        notes=(
            "torch 2.13.0+cpu, not requirements/train.txt's 2.14.1: no CPU build of 2.14.1 "
            "is reachable from this project's build machines (containers/overrides/cpu.txt)",
            "torchvision 0.28.0 without its compiled ops: PyPI has only its CUDA build, "
            "whose ops cannot load beside a CPU torch; models, transforms and StochasticDepth "
            "work, nms/roi_align/deform_conv2d and torchvision.io's decoders raise errors "
            "(containers/scripts/torchvision_cpu.py)",
        ),
    ),
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
# The gpu flavour's lock when none is named: the Dockerfile's TORCH_SOURCE default, committed,
# so that the Dockerfile's own example command works on a fresh checkout.
DEFAULT_LOCK = "pypi"
# The cpu flavour's: PyTorch's CPU build, committed.
CPU_LOCK = "cpu"
NOTE_PREFIX = "# note: "
# The oldest Python among the bases (Debian 12: 3.11; Ubuntu 24.04: 3.12): every lock is
# resolved for it, and a universal one for every newer Python as well.
LOCK_PYTHON = "3.11"
UV = "uv==0.13.8"


# The base image made by containers/engine.sh where no registry can be reached: Debian 12
# for this machine's CPU, whose python3 is LOCAL_BASE_PYTHON; for another CPU the same with
# the CPU's name appended (local_base).
LOCAL_BASE = "ddpimg-base:bookworm"
LOCAL_BASE_PYTHON = "3.11"


def local_base(platform: Platform | None) -> str:
    """The local base image of a lock's platform (None: this machine's)."""
    return LOCAL_BASE if platform is None else f"{LOCAL_BASE}-{platform.arch}"


def lock_file(name: str) -> Path:
    return LOCK_DIR / f"{name}.txt"


def default_lock(flavour: str) -> str:
    """The lock of ``flavour`` when none is named."""
    return CPU_LOCK if flavour == "cpu" else DEFAULT_LOCK


def with_notes(text: str, notes: Sequence[str]) -> str:
    """The lock ``text`` (uv's output) with ``notes`` as NOTE_PREFIX lines after its header
    comment, replacing any there."""
    lines = text.splitlines(keepends=True)
    header = 0
    while header < len(lines) and lines[header].startswith("#"):
        header += 1
    kept = [line for line in lines[:header] if not line.startswith(NOTE_PREFIX)]
    return "".join([*kept, *(f"{NOTE_PREFIX}{note}\n" for note in notes), *lines[header:]])


def add_notes(path: Path, notes: Sequence[str]) -> None:
    """Write ``notes`` into the lock file ``path`` (with_notes), unless they are there."""
    text = path.read_text(encoding="utf-8")
    noted = with_notes(text, notes)
    if noted != text:
        path.write_text(noted, encoding="utf-8")


def find_links(env: Mapping[str, str]) -> list[str]:
    """The directories of pip's find-links (``PIP_FIND_LINKS``: space-separated) that
    exist: wheels held on this machine that uv, which reads no pip configuration, may take."""
    return [path for path in env.get("PIP_FIND_LINKS", "").split() if Path(path).is_dir()]


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


def make(session: Session, names: Sequence[str], env: Mapping[str, str] = os.environ) -> None:
    """Make the locks ``names`` (every lock when empty). A lock whose index cannot be reached
    takes its files from pip's find-links directories in ``env`` (find_links) where there
    are any; otherwise it fails when named, and is skipped with a warning when all are made."""
    unknown = sorted(set(names) - set(LOCKS))
    if unknown:
        session.error(f"unknown lock {', '.join(unknown)}: choose from {', '.join(LOCKS)}")
    session.install(UV)
    skipped = []
    local = find_links(env)
    for name in names or list(LOCKS):
        command = compile_command(name)
        index = LOCKS[name].index
        if index is not None:
            reason = unreachable(f"{index}/torch/")
            if reason is None:
                command += ["--extra-index-url", index]  # uv: searched before --index-url
            elif local:
                # The hashes are the files' own, wherever they were read.
                session.warn(f"lock {name}: {reason}; taking its torch from {' '.join(local)}")
            else:
                if names:
                    session.error(f"lock {name}: its index cannot be reached: {reason}")
                skipped.append(f"{name} ({reason})")
                continue
            command += [word for path in local for word in ("--find-links", path)]
        session.run(*command)
        notes = LOCKS[name].notes
        if notes:
            add_notes(lock_file(name), notes)
    if skipped:
        session.warn(f"not made (index unreachable from here): {'; '.join(skipped)}")
