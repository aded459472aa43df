"""The wheels the lent GPU machine lacks, and the proof that they are all it lacks.

The machine (``device-packages.txt``: torch 2.11 for CUDA 13, torchvision, numpy, Lightning,
mpi4py, ...) reaches no registry, and what a call carries travels with the working tree, 64
MiB in all. What ddpimg's stack needs beyond its list is carried as wheels for CPython 3.12 on
manylinux x86-64 in an ignored folder (``.whl/``); ``python benchmarks/device_wheels.py``
(``nox -s device-wheels``) makes it:

1. ddpimg's wheel from this tree, and DeepSpeed's from its sdist (DeepSpeed publishes no
   wheel) with no ops prebuilt: a pure-Python wheel, which JIT-compiles on the GPU machine
   what it needs there (that machine has nvcc and ninja);
2. the stack's requirements (:func:`stack_requirements`: requirements/train.txt and every
   extra of ddpimg) followed one by one: a package on the device's list stays there; any
   other is downloaded at the version of the image's lock (containers/lock/pypi.txt), and
   its own requirements are followed in turn;
3. a wheel in the folder that nothing needs any more is removed (two versions of one
   package stop an install);
4. :func:`prove`: pip resolves the stack's requirements for Python 3.12 with no index, from
   the folder and from a folder of stub wheels, one per package of the device's list (name
   and version, no requirements: the device has their own; an unread version is taken to be
   the lock's, or 9999 where the lock has none). A missing wheel fails the
   resolution; a carried wheel the resolution does not use is an error too; a requirement
   with a version bound on a device package whose version was never read is listed as an
   assumption (the install on the device, pip against the real versions, is the last word);
5. the size: the wheels plus the working tree within the 64 MiB.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import tomllib
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEVICE_PACKAGES = HERE / "device-packages.txt"
TRAIN_REQUIREMENTS = REPO / "requirements" / "train.txt"
LOCK = REPO / "containers" / "lock" / "pypi.txt"
CARRY_LIMIT_BYTES = 64 << 20
PYTHON_VERSION = "3.12"
# What the device's interpreter is, for pip (--python-version etc.) and for the markers in
# the wheels' requirements.
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
MARKER_ENVIRONMENT = {
    "implementation_name": "cpython",
    "platform_machine": "x86_64",
    "platform_python_implementation": "CPython",
    "platform_system": "Linux",
    "python_full_version": "3.12.3",
    "python_version": PYTHON_VERSION,
    "sys_platform": "linux",
    "os_name": "posix",
}
# Built here rather than downloaded.
BUILT = ("ddpimg", "deepspeed")
# The stub version of a device package whose version was never read and that the lock does not
# pin: it satisfies any lower bound, and such bounds are reported as assumptions. One the lock
# pins stands at the lock's version instead, which meets the stack's upper bounds too (wandb
# 0.31's protobuf<8 against 9999 failed the proof): the lock was resolved with them.
UNREAD_VERSION = "9999"


class WheelError(Exception):
    """The wheel folder cannot be made or is not what the device needs."""


def read_device_packages(path: Path = DEVICE_PACKAGES) -> dict[str, str | None]:
    """Canonical name -> version (None: not read on the device)."""
    packages: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        name, _, version = text.partition("==")
        packages[canonicalize_name(name)] = version.strip() or None
    return packages


def read_lock(path: Path = LOCK) -> dict[str, str]:
    """Canonical name -> pinned version, from a hashed pip-compile lock file."""
    pins = re.findall(r"^([A-Za-z0-9._-]+)==([^\s\\;]+)", path.read_text(), flags=re.MULTILINE)
    return {canonicalize_name(name): version for name, version in pins}


def ddpimg_metadata(repo: Path = REPO) -> tuple[str, tuple[str, ...]]:
    """ddpimg's version and extras, from pyproject.toml."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    return project["version"], tuple(sorted(project.get("optional-dependencies", {})))


def stack_requirements(
    device: Mapping[str, str | None], repo: Path = REPO, train: Path = TRAIN_REQUIREMENTS
) -> list[str]:
    """What the device must have: requirements/train.txt (a package the device has with the
    device's version: the lock's torch 2.14.1 cannot travel, 2.11 is there) and ddpimg with
    every extra."""
    wanted: list[str] = []
    for line in train.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) in device:
            requirement.specifier = SpecifierSet()
        wanted.append(str(requirement))
    version, extras = ddpimg_metadata(repo)
    wanted.append(f"ddpimg[{','.join(extras)}]=={version}")
    return wanted


def applies(requirement: Requirement, extras: Iterable[str]) -> bool:
    """Whether ``requirement`` (a wheel's Requires-Dist) holds on the device for a dependant
    installed with ``extras``."""
    if requirement.marker is None:
        return True
    marker: Marker = requirement.marker
    return any(marker.evaluate({**MARKER_ENVIRONMENT, "extra": extra}) for extra in ("", *extras))


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The Requires-Dist lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    return [
        Requirement(line.split(":", 1)[1].strip())
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def wheel_name(path: Path) -> str:
    return str(parse_wheel_filename(path.name)[0])


def pip_command(python: str = sys.executable) -> list[str]:
    return [python, "-m", "pip"]


def target_options() -> list[str]:
    """pip's options that make it choose wheels for the device rather than for this machine."""
    options = ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp"]
    for platform in PLATFORMS:
        options += ["--platform", platform]
    return options


def isolated_env() -> dict[str, str]:
    """This environment without pip's configuration (PIP_* variables, pip.conf files): a
    proof that read this machine's extra find-links or indexes would prove nothing."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def _run(argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
    proc = subprocess.run(list(argv), capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise WheelError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")


def build_deepspeed(version: str, folder: Path, pip: Sequence[str]) -> Path:
    """DeepSpeed's wheel built from its sdist with no ops prebuilt; refused if it holds
    compiled code (it would be this machine's, for Python 3.11)."""
    found = sorted(folder.glob(f"deepspeed-{version}-*.whl"))
    if not found:
        env = dict(os.environ, DS_BUILD_OPS="0")
        _run([*pip, "wheel", "--no-deps", "--no-binary", "deepspeed", "-w", str(folder),
              f"deepspeed=={version}"], env)  # fmt: skip
        found = sorted(folder.glob(f"deepspeed-{version}-*.whl"))
    if len(found) != 1:
        raise WheelError(f"expected one deepspeed {version} wheel in {folder}, found {found}")
    with zipfile.ZipFile(found[0]) as archive:
        compiled = [n for n in archive.namelist() if n.endswith(".so")]
    if compiled:
        raise WheelError(f"{found[0].name} holds compiled ops ({', '.join(compiled[:3])})")
    return found[0]


def build_ddpimg(folder: Path, pip: Sequence[str], repo: Path = REPO) -> Path:
    """ddpimg's wheel from this tree (always rebuilt: the tree changes)."""
    for old in folder.glob("ddpimg-*.whl"):
        old.unlink()
    _run([*pip, "wheel", "--no-deps", "-w", str(folder), str(repo)])
    return next(folder.glob("ddpimg-*.whl"))


def _find(folder: Path, name: str, version: str) -> Path | None:
    for wheel in folder.glob("*.whl"):
        found_name, found_version, _, _ = parse_wheel_filename(wheel.name)
        if found_name == canonicalize_name(name) and str(found_version) == version:
            return wheel
    return None


def download(name: str, version: str, folder: Path, pip: Sequence[str]) -> Path:
    """The wheel of ``name==version`` for the device (one already in ``folder`` is kept)."""
    wheel = _find(folder, name, version)
    if wheel is None:
        _run([*pip, "download", "--no-deps", *target_options(), "-d", str(folder),
              f"{name}=={version}"])  # fmt: skip
        wheel = _find(folder, name, version)
    if wheel is None:
        raise WheelError(f"pip downloaded no wheel of {name}=={version} into {folder}")
    return wheel


@dataclass
class Carried:
    """What goes into the folder, and why (which requirement pulled each one in)."""

    wheels: dict[str, Path] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)


def collect(
    requirements: Sequence[str],
    device: Mapping[str, str | None],
    lock: Mapping[str, str],
    folder: Path,
    pip: Sequence[str],
) -> Carried:
    """Steps 1-2 of the module's recipe: build, then follow the requirements."""
    folder.mkdir(parents=True, exist_ok=True)
    carried = Carried()
    carried.wheels["ddpimg"] = build_ddpimg(folder, pip)
    carried.reasons["ddpimg"] = "ddpimg itself, built from this tree"
    pending: list[tuple[Requirement, tuple[str, ...], str]] = [
        (Requirement(text), (), "the stack") for text in requirements
    ]
    while pending:
        requirement, dependant_extras, wanted_by = pending.pop(0)
        if not applies(requirement, dependant_extras):
            continue
        name = canonicalize_name(requirement.name)
        if name in carried.wheels and name != "ddpimg":
            continue
        if name in device and name not in BUILT:
            if device_satisfies(requirement, device[name], lock.get(name)):
                continue
            carried.reasons[name] = (
                f"{wanted_by} needs {requirement}, and the device's version was not read: "
                "carried in case the device's is older (pip keeps the device's if it fits)"
                if device[name] is None
                else f"{wanted_by} needs {requirement}, the device has {device[name]}"
            )
        if name == "ddpimg":
            wheel = carried.wheels["ddpimg"]
        else:
            version = lock.get(name)
            if version is None or not requirement.specifier.contains(version, prereleases=True):
                there = f"the device has {device[name]}" if name in device else "not on the device"
                raise WheelError(
                    f"{requirement} (needed by {wanted_by}): {there}, and "
                    f"{LOCK.relative_to(REPO)} pins {version or 'no version of it'}: add it to "
                    "containers/requirements.in and re-lock (nox -s lock)"
                )
            if name == "deepspeed":
                wheel = build_deepspeed(version, folder, pip)
                carried.reasons[name] = f"built from its sdist, no ops (needed by {wanted_by})"
            else:
                wheel = download(name, version, folder, pip)
                carried.reasons.setdefault(name, f"needed by {wanted_by}")
            carried.wheels[name] = wheel
        extras = tuple(sorted(requirement.extras))
        pending += [(dep, extras, name) for dep in wheel_requirements(wheel)]
    return carried


def device_satisfies(
    requirement: Requirement, version: str | None, lock_version: str | None
) -> bool:
    """Whether the device's ``version`` of a package meets ``requirement``. An unread version
    is taken to, unless the requirement's lower bound is as recent as the lock's own version
    (same major.minor: typing-extensions>=4.16.0 with 4.16.0 in the lock): an image built a
    few months earlier may have an older one, so the lock's wheel travels too."""
    if version is not None:
        return requirement.specifier.contains(version, prereleases=True)
    if lock_version is None or not requirement.specifier.contains(lock_version):
        return True
    locked = Version(lock_version).release[:2]
    return not any(
        spec.operator in (">=", ">", "==", "~=") and Version(spec.version).release[:2] == locked
        for spec in requirement.specifier
    )


def prune(folder: Path, keep: Iterable[Path]) -> list[str]:
    """Remove the wheels of ``folder`` not in ``keep``; their names."""
    kept = {path.resolve() for path in keep}
    removed = []
    for wheel in sorted(folder.glob("*.whl")):
        if wheel.resolve() not in kept:
            wheel.unlink()
            removed.append(wheel.name)
    return removed


def stub_wheel(folder: Path, name: str, version: str, requires: Sequence[str] = ()) -> Path:
    """A wheel with only metadata: a device package for the proof (no requirements: the
    device has what it needs), or any package a test makes up."""
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    files = {
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: ddpimg-runbook\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
        record = "".join(f"{member},,\n" for member in [*files, f"{info}/RECORD"])
        archive.writestr(f"{info}/RECORD", record)
    return path


@dataclass(frozen=True)
class Proof:
    """The resolution: what pip took from the carried folder and from the device."""

    carried: dict[str, str]  # name -> version
    device: dict[str, str]  # name -> version, or "version not read"
    unused: list[str]  # carried wheels the resolution did not take
    insurance: list[str]  # carried for a device package of unread version (not taken here)
    assumptions: list[str]  # "packaging>=20.0 (deepspeed)": bounds on unread versions

    @property
    def ok(self) -> bool:
        return not self.unused


def prove(
    requirements: Sequence[str],
    folder: Path,
    device: Mapping[str, str | None],
    work: Path,
    pip: Sequence[str],
    *,
    lock: Mapping[str, str] | None = None,
) -> Proof:
    """Step 4 of the module's recipe. Raises WheelError when pip cannot resolve (the message
    names the missing requirement). ``lock``: the versions a device package of unread version
    is taken to have (else UNREAD_VERSION)."""
    stubs = work / "device-stubs"
    stubs.mkdir(parents=True, exist_ok=True)
    for name, version in device.items():
        stub_wheel(stubs, name, version or (lock or {}).get(name, UNREAD_VERSION))
    report = work / "resolution.json"
    argv = [*pip, "install", "--dry-run", "--quiet", "--no-index", "--ignore-installed",
            "--find-links", str(folder), "--find-links", str(stubs), *target_options(),
            "--target", str(work / "target"), "--report", str(report), *requirements]  # fmt: skip
    _run(argv, isolated_env())
    items = json.loads(report.read_text())["install"]
    carried: dict[str, str] = {}
    on_device: dict[str, str] = {}
    assumptions: list[str] = []
    for item in items:
        meta = item["metadata"]
        name = canonicalize_name(meta["name"])
        source = Path(unquote(urlparse(item["download_info"]["url"]).path))
        if source.parent == stubs.resolve():
            on_device[name] = meta["version"] if device[name] else "version not read"
        else:
            carried[name] = meta["version"]
        extras = tuple(item.get("requested_extras") or ())
        for text in meta.get("requires_dist") or ():
            dependency = Requirement(text)
            wanted = canonicalize_name(dependency.name)
            if (
                applies(dependency, extras)
                and dependency.specifier
                and wanted in device
                and device[wanted] is None
            ):
                assumptions.append(f"{dependency.name}{dependency.specifier} ({meta['name']})")
    in_folder = {wheel_name(wheel): wheel.name for wheel in folder.glob("*.whl")}
    left = {name: file for name, file in in_folder.items() if name not in carried}
    insurance = sorted(file for name, file in left.items() if name in device and not device[name])
    unused = sorted(file for file in left.values() if file not in insurance)
    return Proof(carried, on_device, unused, insurance, sorted(set(assumptions)))


def tree_bytes(repo: Path = REPO) -> int:
    """The size of what the device tool sends besides the carried folders: tracked files and
    untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout.decode()
    paths = [repo / name for name in listed.split("\0") if name]
    return sum(path.lstat().st_size for path in paths if path.is_file() or path.is_symlink())


def folder_bytes(folder: Path) -> int:
    return sum(wheel.stat().st_size for wheel in folder.glob("*.whl"))
