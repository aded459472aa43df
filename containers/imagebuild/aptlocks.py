"""The Debian package locks: one per base image and CPU, beside the pip locks, made by
`nox -s lock -- apt` (containers/lock/apt/NAME-ARCH.txt).

A Debian mirror serves one version of each package of a release, and moves on with each
point release and security update; so the image's system packages are pinned the way its
Python packages are: the lock lists, for each stage of containers/Dockerfile on that base
(``runtime-FLAVOUR``, ``build-FLAVOUR-MPI4PY_BUILD``), every package the stage ends with and
its version, as "SECTION PACKAGE VERSION" lines. install-system.sh compares what apt would
install with it before installing and stops, naming each package, both versions and this
command, when the mirror (or the base) has moved on. The lock is made by running
install-system.sh's ``lock`` step in a throw-away container of the base.
"""

from __future__ import annotations

import dataclasses
import platform
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from . import locks as pip_locks
from .engine import engine, engine_answers
from .locks import AARCH64, CONTAINERS, CUDA_12_8_BASE, LOCAL_BASE, LOCK_DIR, local_base
from .session import Session

APT_LOCK_DIR = LOCK_DIR / "apt"
DOCKERFILE = CONTAINERS / "Dockerfile"
LOCK_COMMAND = "nox -s lock -- apt"
# platform.machine() -> Debian's (and Docker's) name of the CPU.
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
# Every name on the command line that means all the Debian locks.
ALL_APT = "apt"


@dataclasses.dataclass(frozen=True)
class AptBase:
    """A base image whose packages are locked, and the flavours built on it."""

    images: tuple[str, ...]  # the base's image for each CPU it is locked for
    flavours: tuple[str, ...]
    # The Dockerfile argument whose default names the image (when ``images`` is empty).
    argument: str | None = None


def dockerfile_default(argument: str, dockerfile: Path = DOCKERFILE) -> str:
    """The default of ``ARG ARGUMENT=...`` in the Dockerfile."""
    text = dockerfile.read_text(encoding="utf-8")
    found = re.search(rf"^ARG {argument}=(\S+)$", text, re.MULTILINE)
    if found is None:
        raise ValueError(f"{dockerfile} declares no default for ARG {argument}")
    return found.group(1)


# The local base of containers/engine.sh (Debian 12, no security updates) for both flavours and
# both CPUs; the registry bases, for the flavours built on them.
APT_BASES: dict[str, AptBase] = {
    "debian12": AptBase((LOCAL_BASE, local_base(AARCH64)), ("cpu", "gpu")),
    "python3.11-slim-bookworm": AptBase((), ("cpu",), "CPU_BASE"),
    "cuda13-ubuntu24.04": AptBase((), ("gpu",), "GPU_BASE"),
    "cuda12.8-ubuntu24.04": AptBase((CUDA_12_8_BASE,), ("gpu",)),
}
LOCAL_APT_LOCK = "debian12"


def apt_lock_of(flavour: str, local: bool, gpu_base: str | None) -> str:
    """The Debian lock of a build: the local base's, else the flavour's registry base's
    (``gpu_base``: the pip lock's CUDA base, None for the Dockerfile's default)."""
    if local:
        return LOCAL_APT_LOCK
    if flavour == "cpu":
        return "python3.11-slim-bookworm"
    return "cuda12.8-ubuntu24.04" if gpu_base == CUDA_12_8_BASE else "cuda13-ubuntu24.04"


def apt_lock_files(name: str, directory: Path = APT_LOCK_DIR) -> list[Path]:
    """The files of the Debian lock ``name``, one per CPU (NAME-ARCH.txt)."""
    return sorted(directory.glob(f"{name}-*.txt"))


def missing_apt_lock(name: str, arch: str, directory: Path = APT_LOCK_DIR) -> str | None:
    """Why a build on ``arch`` cannot be locked with ``name`` (None when its file exists)."""
    path = directory / f"{name}-{arch}.txt"
    if path.is_file():
        return None
    return (
        f"{path} does not exist: make it with `nox -s lock -- {name}` where its base and the "
        "Debian mirror are reachable, or build with --apt-unlocked"
    )


def images_of(name: str) -> list[str]:
    base = APT_BASES[name]
    if base.images:
        return list(base.images)
    assert base.argument is not None
    return [dockerfile_default(base.argument)]


def lock_text(image: str, arch: str, lines: Sequence[str]) -> str:
    """The lock file: a header naming the base and how the file was made, then ``lines``
    ("SECTION PACKAGE VERSION") sorted."""
    header = [
        f"# The Debian packages of ddpimg's image stages on {image} ({arch}): every package",
        "# each stage ends with, as SECTION PACKAGE VERSION (containers/imagebuild/aptlocks.py).",
        f"# Made by `{LOCK_COMMAND}`; do not edit.",
    ]
    return "\n".join([*header, *sorted(set(lines))]) + "\n"


def parse_lock_lines(output: str) -> list[str]:
    """The "SECTION PACKAGE VERSION" lines of install-system.sh's ``lock`` output."""
    lines = []
    for line in output.splitlines():
        fields = line.split()
        if len(fields) == 3 and re.fullmatch(r"(runtime|build)-[a-z0-9-]+", fields[0]):
            lines.append(" ".join(fields))
    return lines


def _image_arch(image: str) -> str | None:
    probe = ["docker", "image", "inspect", "--format", "{{.Architecture}}", image]
    found = subprocess.run(probe, capture_output=True, text=True, check=False)
    return found.stdout.strip() if found.returncode == 0 else None


def lock_command(image: str, flavour: str, scripts: Path) -> list[str]:
    """The `docker run` that prints the lock lines of ``flavour`` on ``image``."""
    return [
        "docker", "run", "--rm", "--network", "host", "--user", "0",
        "--env", f"FLAVOUR={flavour}",
        "--volume", f"{scripts.resolve()}:/ddpimg-scripts:ro",
        "--entrypoint", "sh", image, "/ddpimg-scripts/install-system.sh", "lock",
    ]  # fmt: skip


def make(session: Session, names: Sequence[str], named: bool) -> None:
    """Write the Debian locks ``names`` for each of their bases' images this engine has
    (one file per CPU); a lock none of whose images is here is an error when ``named``,
    else skipped with a warning. Needs a Docker engine that reaches the Debian mirror."""
    if not engine_answers():
        reason = "the Debian locks need a Docker engine, and none answers"
        if named:
            session.error(f"{reason}: bash containers/engine.sh start")
        session.warn(f"{reason}: skipped")
        return
    host_arch = DEBIAN_ARCH.get(platform.machine(), platform.machine())
    for name in names:
        present = [(image, arch) for image in images_of(name) if (arch := _image_arch(image))]
        if not present:
            reason = f"lock {name}: none of its base images ({', '.join(images_of(name))}) is here"
            if named:
                session.error(f"{reason}; pull or make one first (containers/engine.sh base)")
            session.warn(f"{reason}: skipped")
            continue
        for image, arch in present:
            if arch != host_arch:
                engine(session, "emulator", arch)
            lines = []
            for flavour in APT_BASES[name].flavours:
                command = lock_command(image, flavour, CONTAINERS / "scripts")
                lines += parse_lock_lines(str(session.run(*command, silent=True, external=True)))
            if not lines:
                session.error(f"lock {name}: install-system.sh printed no package on {image}")
            path = APT_LOCK_DIR / f"{name}-{arch}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(lock_text(image, arch, lines), encoding="utf-8")
            session.log(f"wrote {path}: {len(lines)} lines ({image})")


def make_locks(session: Session, names: Sequence[str]) -> None:
    """`nox -s lock -- NAMES`: the pip locks named (locks.make) and the Debian locks named
    (APT_BASES, or ALL_APT for all); with no name, every lock (a Debian lock whose base this
    engine lacks is skipped with a warning, as a pip lock whose index is out of reach)."""
    apt = [name for name in names if name == ALL_APT or name in APT_BASES]
    pip = [name for name in names if name not in apt]
    if pip or not names:
        pip_locks.make(session, pip)
    if apt or not names:
        chosen = sorted(APT_BASES) if not apt or ALL_APT in apt else apt
        make(session, chosen, named=bool(apt) and ALL_APT not in apt)
